//! Per-application settings (`--applications FILE`): limits that keep one application's
//! flood from delaying another's fires. A TOML file, read at start and again on SIGHUP
//! (a file that does not parse is refused and the settings in force stay):
//!
//! ```toml
//! [applications.orders]
//! fires_per_second = 2000        # delivery rate limit (fires over it wait their turn)
//! commands_per_second = 500      # intake rate limit (commands over it: REJECTED)
//! max_pending = 1000000          # timers not yet done (creates over it: REJECTED)
//! delivery_attempts = 5          # before the dead-letter topic
//! retry_base_ms = 200            # delivery backoff: base, doubling up to
//! retry_max_ms = 10000           #   this
//! callbacks = ["orders.timeouts", "orders.reminders.*"]   # allowed callback topics
//!
//! [applications."*"]             # every application not named
//! fires_per_second = 500
//!
//! [applications.billing.topics]  # billing is bound to topics of its own
//! commands = "billing.timers"    # its commands, and only its commands, come from here
//! results = "billing.timer-results"
//! fired = "billing.timer-fired"  # its default callback topic (default: COMMANDS.fired)
//! state = "billing.timers.state" # its timers' states (default: COMMANDS.state)
//! dead_letter = "billing.timers.dead-letter"   # (default: COMMANDS.dead-letter)
//!
//! [calendars.holidays]           # exclusion calendars timers may name (crate::calendar)
//! dates = ["2026-12-25"]
//! weekly = ["Sat-Sun"]
//! ```
//!
//! Every setting is optional; what an application's entry leaves out comes from the
//! command line (`--max-delivery-attempts`, `--retry-base-ms`, ...), not from `"*"`.
//! Rates and pending limits are for the whole group: each partition takes an even share
//! (timer ids spread an application over the partitions). Metrics name the applications
//! of the file; all others are counted as `other`.

use crate::allow::AllowList;
use crate::calendar::Calendar;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// The settings of one application (or of `"*"`).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Settings {
    /// Most fires delivered per second.
    pub fires_per_second: Option<f64>,
    /// Most commands accepted per second.
    pub commands_per_second: Option<f64>,
    /// Most timers not yet done (scheduled or paused).
    pub max_pending: Option<u64>,
    /// Delivery attempts before the dead-letter topic.
    pub delivery_attempts: Option<i32>,
    /// First delay between delivery attempts, ms.
    pub retry_base_ms: Option<u64>,
    /// Longest delay between delivery attempts, ms.
    pub retry_max_ms: Option<u64>,
    /// Callback topics (exact names, or prefixes ending in `*`).
    pub callbacks: Option<Vec<String>>,
    /// The topics the application is bound to, if any.
    pub topics: Option<Binding>,
}

/// The topics of a bound application (`[applications.NAME.topics]`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Binding {
    /// Its commands topic: whatever is read there acts for the application.
    pub commands: String,
    /// Its results topic: its results go there only.
    pub results: String,
    /// Its default callback topic (`COMMANDS.fired` when left out).
    pub fired: Option<String>,
    /// Its state topic (`COMMANDS.state` when left out).
    pub state: Option<String>,
    /// Its dead-letter topic: its undecodable commands and undeliverable fires
    /// (`COMMANDS.dead-letter` when left out).
    pub dead_letter: Option<String>,
}

impl Binding {
    /// The default callback topic.
    pub fn fired(&self) -> String {
        self.fired
            .clone()
            .unwrap_or_else(|| format!("{}.fired", self.commands))
    }

    /// The state topic.
    pub fn state(&self) -> String {
        self.state
            .clone()
            .unwrap_or_else(|| format!("{}.state", self.commands))
    }

    /// The dead-letter topic.
    pub fn dead_letter(&self) -> String {
        self.dead_letter
            .clone()
            .unwrap_or_else(|| format!("{}.dead-letter", self.commands))
    }

    /// Its topics by role (`commands`, `results`, `fired`, `state`, `dead_letter`).
    pub fn roles(&self) -> [(&'static str, String); 5] {
        [
            ("commands", self.commands.clone()),
            ("results", self.results.clone()),
            ("fired", self.fired()),
            ("state", self.state()),
            ("dead_letter", self.dead_letter()),
        ]
    }
}

#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    applications: HashMap<String, Settings>,
    #[serde(default)]
    calendars: HashMap<String, crate::calendar::Spec>,
}

/// A parsed applications file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Applications {
    apps: HashMap<String, Settings>,
    callbacks: Option<AllowList>,
    calendars: HashMap<String, Arc<Calendar>>,
}

/// No settings: the defaults of an application nobody named.
static NONE: Settings = Settings {
    fires_per_second: None,
    commands_per_second: None,
    max_pending: None,
    delivery_attempts: None,
    retry_base_ms: None,
    retry_max_ms: None,
    callbacks: None,
    topics: None,
};

impl Applications {
    /// Parses and checks the TOML text of an applications file.
    pub fn parse(text: &str) -> Result<Applications, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        for (name, s) in &file.applications {
            let positive = |v: Option<f64>| v.is_none_or(|v| v > 0.0 && v.is_finite());
            if !positive(s.fires_per_second) || !positive(s.commands_per_second) {
                return Err(format!("{name}: rates must be positive numbers"));
            }
            if s.delivery_attempts.is_some_and(|a| a < 1) {
                return Err(format!("{name}: delivery_attempts must be at least 1"));
            }
        }
        check_bindings(&file.applications)?;
        let lists: HashMap<String, Vec<String>> = file
            .applications
            .iter()
            .filter_map(|(n, s)| Some((n.clone(), s.callbacks.clone()?)))
            .collect();
        let callbacks = (!lists.is_empty()).then(|| AllowList::from_map(lists));
        let calendars = file
            .calendars
            .iter()
            .map(|(name, spec)| match Calendar::parse(spec) {
                Ok(c) => Ok((name.clone(), Arc::new(c))),
                Err(e) => Err(format!("calendar {name}: {e}")),
            })
            .collect::<Result<_, _>>()?;
        Ok(Applications {
            apps: file.applications,
            callbacks,
            calendars,
        })
    }

    /// The exclusion calendar named `name`, if the file defines it.
    pub fn calendar(&self, name: &str) -> Option<Arc<Calendar>> {
        self.calendars.get(name).cloned()
    }

    /// The settings of `app`: its own entry, else `"*"`, else none.
    pub fn of(&self, app: &str) -> &Settings {
        self.apps
            .get(app)
            .or_else(|| self.apps.get("*"))
            .unwrap_or(&NONE)
    }

    /// Whether `app`'s fires are rate-limited (`fires_per_second`).
    pub fn paced(&self, app: &str) -> bool {
        self.of(app).fires_per_second.is_some()
    }

    /// The metrics label of `app`: its name when the file names it, else `other`.
    pub fn label<'a>(&self, app: &'a str) -> &'a str {
        if app != "*" && self.apps.contains_key(app) {
            app
        } else {
            "other"
        }
    }

    /// Whether the file names any application (else per-application metrics are skipped:
    /// every application would be `other`).
    pub fn names_any(&self) -> bool {
        self.apps.keys().any(|n| n != "*")
    }

    /// The applications the file names, with their settings (`"*"` included).
    pub fn named(&self) -> impl Iterator<Item = (&str, &Settings)> {
        self.apps.iter().map(|(n, s)| (n.as_str(), s))
    }

    /// The bound applications with their topics.
    pub fn bindings(&self) -> impl Iterator<Item = (&str, &Binding)> {
        self.apps
            .iter()
            .filter_map(|(n, s)| Some((n.as_str(), s.topics.as_ref()?)))
    }

    /// The callback allow-list the file's `callbacks` entries make, if any.
    pub fn callbacks(&self) -> Option<&AllowList> {
        self.callbacks.as_ref()
    }
}

/// The settings in force, replaced by [`Apps::reload`] (on SIGHUP). Cheap to clone.
#[derive(Clone, Default)]
pub struct Apps {
    path: Option<PathBuf>,
    current: Arc<RwLock<Arc<Applications>>>,
}

impl std::fmt::Debug for Apps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Apps").field("path", &self.path).finish()
    }
}

impl Apps {
    /// Reads `path` (clap's value parser of `--applications`).
    pub fn load(path: &str) -> Result<Apps, String> {
        let apps = read(Path::new(path))?;
        Ok(Apps {
            path: Some(PathBuf::from(path)),
            current: Arc::new(RwLock::new(Arc::new(apps))),
        })
    }

    /// Fixed settings (tests, and no file).
    pub fn fixed(apps: Applications) -> Apps {
        Apps {
            path: None,
            current: Arc::new(RwLock::new(Arc::new(apps))),
        }
    }

    /// The settings in force now.
    pub fn current(&self) -> Arc<Applications> {
        self.current.read().expect("apps lock").clone()
    }

    /// The definition of the calendar `spec` names, in the file in force (none when it
    /// names none, or one the file does not define).
    pub fn calendar_of(&self, spec: &crate::schedule::CronSpec) -> Option<Arc<Calendar>> {
        self.current().calendar(spec.calendar.as_deref()?)
    }

    /// Reads the file again; on an error the settings in force stay.
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let apps = read(path)?;
        let before: HashMap<_, _> = self
            .current()
            .bindings()
            .map(|(n, b)| (n.to_string(), b.clone()))
            .collect();
        let after: HashMap<_, _> = apps
            .bindings()
            .map(|(n, b)| (n.to_string(), b.clone()))
            .collect();
        if before != after {
            tracing::warn!("the applications file binds other topics now: bindings change when the instance restarts");
        }
        *self.current.write().expect("apps lock") = Arc::new(apps);
        Ok(())
    }
}

/// Reads the applications file again on every SIGHUP until `token` is cancelled.
pub fn reload_on_sighup(apps: Apps, token: crate::shutdown::CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        tracing::warn!("no SIGHUP handler: the applications file is read only at start");
        return;
    };
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = token.cancelled() => return,
                _ = hup.recv() => match apps.reload() {
                    Ok(()) => tracing::info!(path = ?apps.path, "applications file reloaded"),
                    Err(e) => tracing::error!(error = %e, "applications file not reloaded; the settings in force stay"),
                },
            }
        }
    });
}

/// Bindings name real applications, and no topic twice.
fn check_bindings(apps: &HashMap<String, Settings>) -> Result<(), String> {
    let mut seen: HashMap<String, String> = HashMap::new();
    for (name, b) in apps
        .iter()
        .filter_map(|(n, s)| Some((n, s.topics.as_ref()?)))
    {
        if name == "*" || name.is_empty() {
            return Err(format!(
                "{name:?}: only a named application can be bound to topics"
            ));
        }
        for (role, topic) in b.roles() {
            if topic.is_empty() {
                return Err(format!("{name}: topics.{role} is empty"));
            }
            let this = format!("{name}'s {role} topic");
            if let Some(other) = seen.insert(topic.clone(), this.clone()) {
                return Err(format!("{topic:?} is both {other} and {this}"));
            }
        }
    }
    Ok(())
}

fn read(path: &Path) -> Result<Applications, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    Applications::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
