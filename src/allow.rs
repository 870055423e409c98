//! The callback allow-list (`--callback-allow-list FILE`): where each application may
//! deliver. A TOML file maps application names to callback topics; an entry ending in
//! `*` is a prefix. The entry `"*"` applies to applications without their own:
//!
//! ```toml
//! [applications]
//! orders = ["orders.timeouts", "orders.reminders.*"]
//! billing = ["billing.*"]
//! "*" = ["shared.callbacks"]
//! ```
//!
//! Without the file every application may deliver to any topic but ktimer's own
//! commands, results and dead-letter topics (never valid callback topics). With it, an
//! application delivers only to what its entry (or `"*"`) lists, and to the fired topic
//! (the default callback).

use std::collections::HashMap;
use std::sync::Arc;

/// Per-application callback topics, exact names or prefixes (`name*`).
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllowList {
    /// Application name (or `"*"`) to topic patterns.
    applications: HashMap<String, Vec<String>>,
}

impl AllowList {
    /// Parses the TOML text of an allow-list.
    pub fn parse(text: &str) -> Result<AllowList, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Reads and parses `path` (clap's value parser of `--callback-allow-list`).
    pub fn load(path: &str) -> Result<Arc<AllowList>, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        AllowList::parse(&text)
            .map(Arc::new)
            .map_err(|e| format!("{path}: {e}"))
    }

    /// The allow-list of these application entries (the applications file's `callbacks`).
    pub fn from_map(applications: HashMap<String, Vec<String>>) -> AllowList {
        AllowList { applications }
    }

    /// Whether `application` may deliver to `topic`.
    pub fn permits(&self, application: &str, topic: &str) -> bool {
        let patterns = self
            .applications
            .get(application)
            .or_else(|| self.applications.get("*"));
        patterns
            .into_iter()
            .flatten()
            .any(|p| match p.strip_suffix('*') {
                Some(prefix) => topic.starts_with(prefix),
                None => p == topic,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::AllowList;

    #[test]
    fn entries_are_names_or_prefixes_and_star_is_the_default() {
        let a = AllowList::parse(
            r#"
            [applications]
            orders = ["orders.timeouts", "orders.reminders.*"]
            "*" = ["shared"]
            "#,
        )
        .unwrap();
        assert!(a.permits("orders", "orders.timeouts"));
        assert!(a.permits("orders", "orders.reminders.eu"));
        assert!(!a.permits("orders", "orders.timeouts2"));
        assert!(
            !a.permits("orders", "shared"),
            "an own entry replaces the default"
        );
        assert!(a.permits("billing", "shared"));
        assert!(!a.permits("billing", "orders.timeouts"));
        assert!(AllowList::parse("[apps]\nx = []").is_err());
    }
}
