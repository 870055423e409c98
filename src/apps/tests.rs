use super::*;

const FILE: &str = r#"
    [applications.orders]
    fires_per_second = 2000
    max_pending = 10
    callbacks = ["orders.*"]
    [applications."*"]
    commands_per_second = 5
"#;

#[test]
fn an_application_gets_its_entry_or_the_default() {
    let a = Applications::parse(FILE).unwrap();
    assert_eq!(a.of("orders").fires_per_second, Some(2000.0));
    assert_eq!(a.of("orders").commands_per_second, None, "not inherited");
    assert_eq!(a.of("billing").commands_per_second, Some(5.0));
    assert_eq!(a.label("orders"), "orders");
    assert_eq!(a.label("billing"), "other");
    let cb = a.callbacks().unwrap();
    assert!(cb.permits("orders", "orders.x"));
    assert!(!cb.permits("orders", "billing.x"));
    assert!(
        !cb.permits("billing", "orders.x"),
        "\"*\" lists no callbacks"
    );
    assert_eq!(Applications::parse("").unwrap().of("x"), &NONE);
}

#[test]
fn bad_files_are_refused_with_a_reason() {
    let bad = |t: &str| Applications::parse(t).unwrap_err();
    assert!(bad("[applications.a]\nfires_per_second = 0").contains("positive"));
    assert!(bad("[applications.a]\ndelivery_attempts = 0").contains("at least 1"));
    assert!(bad("[applications.a]\nfires = 1").contains("unknown field"));
}

#[test]
fn bindings_name_topics_once() {
    let a = Applications::parse("[applications.b.topics]\ncommands = \"b.c\"\nresults = \"b.r\"\n")
        .unwrap();
    let (name, b) = a.bindings().next().unwrap();
    assert_eq!(
        (name, b.fired(), b.state()),
        ("b", "b.c.fired".into(), "b.c.state".into())
    );
    let bad = |t: &str| Applications::parse(t).unwrap_err();
    let twice = "[applications.a.topics]\ncommands = \"x\"\nresults = \"r\"\n\
                 [applications.b.topics]\ncommands = \"y\"\nresults = \"r\"\n";
    assert!(bad(twice).contains("\"r\" is both"), "{}", bad(twice));
    let star = "[applications.\"*\".topics]\ncommands = \"x\"\nresults = \"r\"\n";
    assert!(bad(star).contains("only a named application"));
    assert!(bad("[applications.a.topics]\ncommands = \"x\"\n").contains("results"));
}

#[test]
fn a_reload_replaces_the_settings_and_a_bad_file_keeps_them() {
    let path = std::env::temp_dir().join(format!("ktimer-apps-{}.toml", std::process::id()));
    std::fs::write(&path, FILE).unwrap();
    let apps = Apps::load(path.to_str().unwrap()).unwrap();
    std::fs::write(&path, "[applications.orders]\nfires_per_second = 5").unwrap();
    apps.reload().unwrap();
    assert_eq!(apps.current().of("orders").fires_per_second, Some(5.0));
    std::fs::write(&path, "not toml [").unwrap();
    assert!(apps.reload().is_err());
    assert_eq!(apps.current().of("orders").fires_per_second, Some(5.0));
    let _ = std::fs::remove_file(path);
}

#[test]
fn calendars_are_parsed_and_a_bad_one_refuses_the_file() {
    let apps = Applications::parse(
        r#"
        [calendars.holidays]
        dates = ["2026-12-25"]
        weekly = ["Sat-Sun"]
        "#,
    )
    .unwrap();
    assert!(apps.calendar("holidays").is_some());
    assert!(apps.calendar("other").is_none());
    let bad = Applications::parse("[calendars.x]\nweekly = [\"Someday\"]\n").unwrap_err();
    assert!(
        bad.contains("calendar x") && bad.contains("Someday"),
        "{bad}"
    );
}

#[test]
fn a_reload_brings_the_files_new_calendars() {
    let name = format!("ktimer-calendars-{}.toml", std::process::id());
    let path = std::env::temp_dir().join(name);
    std::fs::write(&path, "[calendars.a]\ndates = [\"2026-12-25\"]\n").unwrap();
    let apps = Apps::load(path.to_str().unwrap()).unwrap();
    assert!(apps.current().calendar("a").is_some());
    std::fs::write(&path, "[calendars.b]\nweekly = [\"Sat-Sun\"]\n").unwrap();
    apps.reload().unwrap();
    let now = apps.current();
    assert!(now.calendar("a").is_none() && now.calendar("b").is_some());
    std::fs::write(&path, "[calendars.c]\nweekly = [\"Caturday\"]\n").unwrap();
    assert!(apps.reload().is_err(), "a bad file is refused");
    assert!(
        apps.current().calendar("b").is_some(),
        "and the calendars in force stay"
    );
    let _ = std::fs::remove_file(path);
}
