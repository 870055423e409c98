//! The Lua scripts (`src/store/*.lua`), each with the prelude it needs, loaded into Redis
//! once at start (and again only if Redis lost them).

use redis::{Cmd, Pipeline, Script, ToRedisArgs};

/// Timer records (`record.lua`: their packing, history and tallies; `place.lua`: where a
/// timer lives: the bucket or a key of its own) and timer helpers (`misfire.lua`: misfire planning,
/// completion), prepended to every script that reads or writes timers.
const PRELUDE: [&str; 3] = [
    include_str!("record.lua"),
    include_str!("place.lua"),
    include_str!("misfire.lua"),
];

/// The codec of the `writing` hash (the states the intake writes), prepended to the
/// scripts that read or write it.
const WRITING: &str = include_str!("writing.lua");

/// `code` with the prelude before it.
fn with_prelude(code: &str) -> String {
    [PRELUDE[0], PRELUDE[1], PRELUDE[2], code].concat()
}

/// A script with its source (to load it into every primary of a cluster).
pub(super) struct Lua {
    script: Script,
    pub(super) code: String,
}

impl Lua {
    fn new(code: &str) -> Lua {
        Lua {
            script: Script::new(code),
            code: code.to_string(),
        }
    }

    /// A call of this script, to fill with its keys and then its arguments.
    pub(super) fn call(&self) -> Call<'_> {
        Call {
            sha: self.script.get_hash(),
            keys: Vec::with_capacity(16),
            cmd: None,
        }
    }
}

/// One call of a script, written straight into its `EVALSHA` command: the keys (every
/// one before the first argument), then the arguments, each written once into the
/// command's buffer (no vector per argument, no second copy: a chunk of commands has
/// about 20 arguments per command).
pub(super) struct Call<'a> {
    sha: &'a str,
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
        let Call { sha, keys, cmd } = self;
        cmd.get_or_insert_with(|| {
            let mut c = redis::cmd("EVALSHA");
            c.arg(*sha).arg(keys.len()).arg(&keys[..]);
            c
        })
    }

    /// Appends the call to pipeline `p`.
    pub(super) fn add_to(mut self, p: &mut Pipeline) {
        self.command();
        p.add_command(self.cmd.take().expect("begun"));
    }
}

impl std::ops::Deref for Lua {
    type Target = Script;
    fn deref(&self) -> &Script {
        &self.script
    }
}

/// The Lua scripts, loaded once.
pub(super) struct Scripts {
    pub(super) apply: Lua,
    pub(super) create: Lua,
    pub(super) mark: Lua,
    pub(super) claim: Lua,
    pub(super) ack: Lua,
    pub(super) swap: Lua,
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
        Scripts {
            apply: Lua::new(&with_prelude(
                &[WRITING, include_str!("apply.lua")].concat(),
            )),
            create: Lua::new(&with_prelude(include_str!("create.lua"))),
            mark: Lua::new(include_str!("mark.lua")),
            claim: Lua::new(&with_prelude(include_str!("claim.lua"))),
            ack: Lua::new(&with_prelude(include_str!("ack.lua"))),
            swap: Lua::new(&with_prelude(include_str!("swap.lua"))),
            recover: Lua::new(&with_prelude(include_str!("recover.lua"))),
            cron_due: Lua::new(&with_prelude(include_str!("cron_due.lua"))),
            materialize: Lua::new(&with_prelude(include_str!("materialize.lua"))),
            acquire: Lua::new(&[WRITING, include_str!("acquire.lua")].concat()),
            checkpoint: Lua::new(&with_prelude(
                &[WRITING, include_str!("checkpoint.lua")].concat(),
            )),
            checkpointed: Lua::new(include_str!("checkpointed.lua")),
            written: Lua::new(&[WRITING, include_str!("written.lua")].concat()),
            restore: Lua::new(&with_prelude(include_str!("restore.lua"))),
            read: Lua::new(&with_prelude(include_str!("read.lua"))),
            promote: Lua::new(&with_prelude(include_str!("promote.lua"))),
            list: Lua::new(&with_prelude(include_str!("list.lua"))),
        }
    }

    /// Every script with its name (the file it comes from).
    pub(super) fn named(&self) -> [(&'static str, &Lua); 17] {
        [
            ("apply", &self.apply),
            ("create", &self.create),
            ("mark", &self.mark),
            ("claim", &self.claim),
            ("ack", &self.ack),
            ("swap", &self.swap),
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

    pub(super) fn all(&self) -> impl Iterator<Item = &Lua> {
        self.named().into_iter().map(|(_, l)| l)
    }
}

/// Every script's SHA1 (what EVALSHA names) and its name, for tools that attribute
/// Redis's time to scripts (the bench).
pub fn script_names() -> Vec<(String, &'static str)> {
    let scripts = Scripts::new();
    scripts
        .named()
        .iter()
        .map(|(name, l)| (l.get_hash().to_string(), *name))
        .collect()
}
