//! The schema registry, when one is configured: reachable, and the schemas of ktimer's
//! topics registered (ktimer registers them on its first write; producers of commands
//! need the commands topic's).

use super::{Finding, Level};
use std::time::Duration;

/// Asks the registry at `url` about the subjects `<topic>-value` of `topics`.
pub(super) async fn check(url: &str, topics: &[&str], timeout: Duration) -> Vec<Finding> {
    let http = match reqwest::Client::builder().timeout(timeout).build() {
        Ok(c) => c,
        Err(e) => return vec![Finding::new(Level::Fail, "schema registry", e.to_string())],
    };
    let base = url.trim_end_matches('/');
    let listed = http.get(format!("{base}/subjects")).send().await;
    let subjects: Vec<String> = match listed {
        Ok(r) if r.status().is_success() => r.json().await.unwrap_or_default(),
        Ok(r) => {
            let why = format!(
                "{url} answered {} to GET /subjects: check --schema-registry-url",
                r.status()
            );
            return vec![Finding::new(Level::Fail, "schema registry", why)];
        }
        Err(e) => {
            let why = format!("{url}: {e}: check --schema-registry-url and that the registry runs");
            return vec![Finding::new(Level::Fail, "schema registry", why)];
        }
    };
    let mut out = vec![Finding::new(
        Level::Ok,
        "schema registry",
        format!("{url} answered ({} subjects)", subjects.len()),
    )];
    out.extend(topics.iter().map(|t| judge(t, &subjects)));
    out
}

/// Whether the subject of `topic`'s values is among `subjects` (pure).
pub fn judge(topic: &str, subjects: &[String]) -> Finding {
    let subject = format!("{topic}-value");
    let what = format!("schema registry subject {subject}");
    if subjects.contains(&subject) {
        return Finding::new(Level::Ok, what, "registered");
    }
    Finding::new(
        Level::Warn,
        what,
        "not registered yet: ktimer registers it on its first write; a producer that does not \
         register schemas itself needs it first (register schemas/*.avsc under this subject)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_subject_is_a_warning() {
        let subjects = vec!["k.commands-value".to_string()];
        assert_eq!(judge("k.commands", &subjects).level, Level::Ok);
        assert_eq!(judge("k.results", &subjects).level, Level::Warn);
    }
}
