//! Which application a command acts for: proven by the topic it was read from when the
//! application is bound ([`crate::lanes`]), declared by its `application` field otherwise.
//! Pure.

use crate::command::{CommandKind, TimerCommand};
use crate::lanes::{Lane, Lanes};

/// The `application` a command has when its producer named none (the schema's default).
const DEFAULT: &str = "default";

/// The application a command read from `lane` acts for, or why it is refused:
/// * read from a bound lane, it acts for the lane's application; an empty or `default`
///   `application` field (none named) means that one, any other value is refused (a producer of the lane's topic
///   cannot act for another application, nor be mistaken about which it acts for);
/// * read from the shared lane, it may not name a bound application, except to cancel a
///   timer the application created there before it was bound (those keep firing until
///   they end, and can be ended; nothing new is created for it outside its own topic).
pub fn owner(lane: &Lane, lanes: &Lanes, cmd: &TimerCommand) -> Result<String, String> {
    let said = cmd.application.as_str();
    if let Some(app) = &lane.application {
        if said.is_empty() || said == DEFAULT || said == app {
            return Ok(app.clone());
        }
        return Err(format!(
            "the commands topic {} belongs to application {app}; this command says application {}",
            lane.commands,
            super::echo(said.as_bytes())
        ));
    }
    match lanes.bound(said) {
        Some(topic) if cmd.kind != CommandKind::Cancel => Err(format!(
            "application {said} is bound to its own commands topic {topic}: send its commands there"
        )),
        _ => Ok(said.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apps::Applications;
    use crate::config::KafkaArgs;
    use clap::Parser;

    fn lanes() -> Lanes {
        #[derive(Parser)]
        struct A {
            #[command(flatten)]
            k: KafkaArgs,
        }
        let apps = Applications::parse(
            "[applications.orders.topics]\ncommands = \"o.c\"\nresults = \"o.r\"\n",
        )
        .unwrap();
        Lanes::new(&A::parse_from(["x"]).k, &apps).unwrap()
    }

    fn cmd(app: &str, kind: CommandKind) -> TimerCommand {
        let mut c: TimerCommand = serde_json::from_value(serde_json::json!({
            "request_id": "r", "timer_id": "t", "application": app, "kind": "cancel"
        }))
        .unwrap();
        c.kind = kind;
        c
    }

    #[test]
    fn a_bound_topic_acts_for_its_application_only() {
        let lanes = lanes();
        let orders = lanes.by_commands("o.c").unwrap();
        let create = CommandKind::CreateOnce;
        assert_eq!(
            owner(orders, &lanes, &cmd("orders", create)).unwrap(),
            "orders"
        );
        assert_eq!(owner(orders, &lanes, &cmd("", create)).unwrap(), "orders");
        assert_eq!(
            owner(orders, &lanes, &cmd("default", create)).unwrap(),
            "orders"
        );
        let e = owner(orders, &lanes, &cmd("billing", create)).unwrap_err();
        assert!(e.contains("belongs to application orders"), "{e}");
    }

    #[test]
    fn the_shared_topic_may_only_cancel_for_a_bound_application() {
        let lanes = lanes();
        let shared = lanes.shared();
        for kind in [
            CommandKind::CreateOnce,
            CommandKind::Pause,
            CommandKind::FireNow,
        ] {
            let e = owner(shared, &lanes, &cmd("orders", kind)).unwrap_err();
            assert!(e.contains("bound to its own commands topic o.c"), "{e}");
        }
        let cancel = cmd("orders", CommandKind::Cancel);
        assert_eq!(owner(shared, &lanes, &cancel).unwrap(), "orders");
        let billing = cmd("billing", CommandKind::CreateOnce);
        assert_eq!(owner(shared, &lanes, &billing).unwrap(), "billing");
    }
}
