//! The Lua scripts (`src/store/*.lua`) as one Redis Functions library, loaded into every
//! primary once at start (and again into a node that lost it).
//!
//! The helpers every script shares (`record.lua`, `late.lua`, `place.lua`, `misfire.lua`,
//! `writing.lua`, `owed.lua`, `sweep.lua`) are defined once, when Redis loads the library; each script is a
//! function of it, called with `FCALL`. (As `EVALSHA` scripts, each call ran the helpers'
//! definitions again: about 70,000 Redis instructions per call, more than a call's fires
//! cost at a steady rate.)
//!
//! Invariants:
//! - A function's name ends with the library's tag, a digest of the whole library, so a
//!   Redis that kept an older library (data from an older snapshot, an instance of another
//!   version sharing it) never runs another version's code under this version's name: a
//!   name it does not know answers "Function not found", and the library is loaded again.
//! - The helpers' state lives in one table (`REC`, record.lua) that outlives a call in a
//!   library; every function begins with `rec_fresh()`, which makes it new (a call that
//!   failed half-way leaves nothing to the next).

use redis::{Cmd, Pipeline, ToRedisArgs};

/// The helpers, defined once at the top of the library: timer records (`record.lua`: their
/// packing, history and tallies), when a backlog's fires were claimed (`late.lua`), where
/// a timer lives (`place.lua`: the bucket or a key of its own), misfire planning and
/// completion (`misfire.lua`), the codec of the `writing` hash (`writing.lua`: the
/// states the intake writes), of the owed tombstones (`owed.lua`) and the sweep of the
/// fired queue (`sweep.lua`).
const HELPERS: [&str; 7] = [
    include_str!("record.lua"),
    include_str!("late.lua"),
    include_str!("place.lua"),
    include_str!("misfire.lua"),
    include_str!("writing.lua"),
    include_str!("owed.lua"),
    include_str!("sweep.lua"),
];

/// Each script's name (its file) and body; `KEYS` and `ARGV` are its function's
/// arguments.
const BODIES: [(&str, &str); 17] = [
    ("apply", include_str!("apply.lua")),
    ("create", include_str!("create.lua")),
    ("mark", include_str!("mark.lua")),
    ("claim", include_str!("claim.lua")),
    ("ack", include_str!("ack.lua")),
    ("landed", include_str!("landed.lua")),
    ("recover", include_str!("recover.lua")),
    ("cron_due", include_str!("cron_due.lua")),
    ("materialize", include_str!("materialize.lua")),
    ("acquire", include_str!("acquire.lua")),
    ("checkpoint", include_str!("checkpoint.lua")),
    ("checkpointed", include_str!("checkpointed.lua")),
    ("written", include_str!("written.lua")),
    ("restore", include_str!("restore.lua")),
    ("read", include_str!("read.lua")),
    ("promote", include_str!("promote.lua")),
    ("list", include_str!("list.lua")),
];

/// The library's functions, registered after the helpers, each named `NAME_TAG`.
fn functions(tag: &str) -> String {
    let mut out = String::new();
    for (name, body) in BODIES {
        out.push_str(&format!(
            "rec_register('{}', function(KEYS, ARGV)\nrec_fresh()\n{body}\nend)\n",
            function_name(name, tag)
        ));
    }
    out
}

/// The name of script `name`'s function in the library tagged `tag`.
fn function_name(name: &str, tag: &str) -> String {
    format!("ktimer_{name}_{tag}")
}

/// The library's source (`#!lua name=ktimer_TAG`, the helpers, the functions) and its
/// tag: the first 12 hex digits of the SHA-1 of the library written with an empty tag
/// (so the tag moves with any helper, any body and the way they are put together).
fn library() -> (String, String) {
    let untagged = [HELPERS.concat(), functions("")].concat();
    let tag = redis::Script::new(&untagged).get_hash()[..12].to_string();
    let code = format!(
        "#!lua name=ktimer_{tag}\n{}{}",
        HELPERS.concat(),
        functions(&tag)
    );
    (tag, code)
}

/// One script: the name of its function.
pub(super) struct Lua {
    name: String,
}

impl Lua {
    /// A call of this script, to fill with its keys and then its arguments.
    pub(super) fn call(&self) -> Call<'_> {
        Call {
            name: &self.name,
            keys: Vec::with_capacity(16),
            cmd: None,
        }
    }
}

/// One call of a script, written straight into its `FCALL` command: the keys (every one
/// before the first argument), then the arguments, each written once into the command's
/// buffer (no vector per argument, no second copy: a chunk of commands has about 20
/// arguments per command).
pub(super) struct Call<'a> {
    name: &'a str,
    keys: Vec<Vec<u8>>,
    /// The command, begun at the first argument (its key count is known then).
    cmd: Option<Cmd>,
}

impl Call<'_> {
    /// Adds a key.
    pub(super) fn key<K: ToRedisArgs>(&mut self, key: K) -> &mut Self {
        assert!(
            self.cmd.is_none(),
            "a script's keys come before its arguments"
        );
        key.write_redis_args(&mut self.keys);
        self
    }

    /// Adds an argument.
    pub(super) fn arg<A: ToRedisArgs>(&mut self, arg: A) -> &mut Self {
        self.command().arg(arg);
        self
    }

    fn command(&mut self) -> &mut Cmd {
        let Call { name, keys, cmd } = self;
        cmd.get_or_insert_with(|| {
            let mut c = redis::cmd("FCALL");
            c.arg(*name).arg(keys.len()).arg(&keys[..]);
            c
        })
    }

    /// Appends the call to pipeline `p`.
    pub(super) fn add_to(mut self, p: &mut Pipeline) {
        self.command();
        p.add_command(self.cmd.take().expect("begun"));
    }
}

/// The library and its scripts.
pub(super) struct Scripts {
    /// The library's source, for `FUNCTION LOAD`.
    pub(super) library: String,
    pub(super) apply: Lua,
    pub(super) create: Lua,
    pub(super) mark: Lua,
    pub(super) claim: Lua,
    pub(super) ack: Lua,
    pub(super) landed: Lua,
    pub(super) recover: Lua,
    pub(super) cron_due: Lua,
    pub(super) materialize: Lua,
    pub(super) acquire: Lua,
    pub(super) checkpoint: Lua,
    pub(super) checkpointed: Lua,
    pub(super) written: Lua,
    pub(super) restore: Lua,
    pub(super) read: Lua,
    pub(super) promote: Lua,
    pub(super) list: Lua,
}

impl Scripts {
    pub(super) fn new() -> Scripts {
        let (tag, library) = library();
        let f = |name: &str| Lua {
            name: function_name(name, &tag),
        };
        Scripts {
            apply: f("apply"),
            create: f("create"),
            mark: f("mark"),
            claim: f("claim"),
            ack: f("ack"),
            landed: f("landed"),
            recover: f("recover"),
            cron_due: f("cron_due"),
            materialize: f("materialize"),
            acquire: f("acquire"),
            checkpoint: f("checkpoint"),
            checkpointed: f("checkpointed"),
            written: f("written"),
            restore: f("restore"),
            read: f("read"),
            promote: f("promote"),
            list: f("list"),
            library,
        }
    }

    /// Every script with its name (the file it comes from).
    fn named(&self) -> [(&'static str, &Lua); 17] {
        [
            ("apply", &self.apply),
            ("create", &self.create),
            ("mark", &self.mark),
            ("claim", &self.claim),
            ("ack", &self.ack),
            ("landed", &self.landed),
            ("recover", &self.recover),
            ("cron_due", &self.cron_due),
            ("materialize", &self.materialize),
            ("acquire", &self.acquire),
            ("checkpoint", &self.checkpoint),
            ("checkpointed", &self.checkpointed),
            ("written", &self.written),
            ("restore", &self.restore),
            ("read", &self.read),
            ("promote", &self.promote),
            ("list", &self.list),
        ]
    }
}

/// Whether `e` says a function is not loaded (a Redis restarted without its data, a node
/// added or a replica promoted before the library reached it, an older library).
/// (A pipeline's error carries no detail of its own: its text is read.)
pub(super) fn is_missing_function(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError)
        && e.to_string().contains("Function not found")
}

/// Every script's function name and its script's name, for tools that attribute Redis's
/// time to scripts (the bench).
pub fn script_names() -> Vec<(String, &'static str)> {
    let scripts = Scripts::new();
    scripts
        .named()
        .iter()
        .map(|(name, l)| (l.name.clone(), *name))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_is_a_function_of_the_library_named_with_its_tag() {
        let s = Scripts::new();
        let tag = s.library[..40]
            .split('_')
            .nth(1)
            .unwrap()
            .split('\n')
            .next();
        let tag = tag.unwrap().to_string();
        assert_eq!(tag.len(), 12);
        for ((name, lua), (body_name, _)) in s.named().iter().zip(BODIES) {
            assert_eq!(*name, body_name);
            assert_eq!(lua.name, format!("ktimer_{name}_{tag}"));
            let registered = format!("rec_register('{}', ", lua.name);
            assert_eq!(s.library.matches(&registered).count(), 1, "{name}");
        }
    }
}
