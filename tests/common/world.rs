//! Servers a fault scenario owns alone (so it can kill, freeze or wipe them without
//! disturbing other tests).

use super::{free_port, spawn_server, tansu_bin, wait_for_port, Servers};
use std::process::Command as Proc;
use std::time::Duration;

/// Sends `sig` to `pid`.
pub fn signal(pid: u32, sig: i32) {
    unsafe {
        libc::kill(pid as i32, sig);
    }
}

fn wait_port_closed(port: u16) {
    for _ in 0..200 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("port {port} still open");
}

/// A plain HTTP/1.0 GET: status and body, if the server answers.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    Some((code, body))
}

/// The value of metric `name` (a name, or a name and its labels: `x{outcome="y"}`)
/// in the Prometheus text `body`, summed over the series it starts; `None` if absent.
pub fn metric_in(body: &str, name: &str) -> Option<f64> {
    let vals: Vec<f64> = body
        .lines()
        .filter(|l| l.starts_with(name) && !l.starts_with('#'))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    (!vals.is_empty()).then(|| vals.iter().sum())
}

/// A redis-server of one scenario, optionally with an append-only file.
pub struct Redis {
    pub port: u16,
    /// The address it serves besides 127.0.0.1 (and the one its URL names), if any.
    pub host: Option<String>,
    dir: std::path::PathBuf,
    aof: bool,
    pid: u32,
    starts: u32,
}

impl Redis {
    /// Starts a server on a free port; with `aof`, `appendonly yes`, `appendfsync everysec`.
    pub fn start(dir: &std::path::Path, aof: bool) -> Redis {
        Redis::start_on(dir, aof, None)
    }

    /// Like [`Redis::start`], also serving `host` (an address of this host).
    pub fn start_on(dir: &std::path::Path, aof: bool, host: Option<&str>) -> Redis {
        let mut r = Redis {
            port: free_port(),
            host: host.map(String::from),
            dir: dir.to_path_buf(),
            aof,
            pid: 0,
            starts: 0,
        };
        r.launch();
        r
    }

    fn launch(&mut self) {
        self.starts += 1;
        let mut cmd =
            Proc::new(std::env::var("KTIMER_REDIS_SERVER_BIN").unwrap_or("redis-server".into()));
        let (bind, protected) = match &self.host {
            // Another host's instance reaches it: no loopback-only protected mode.
            Some(h) => (format!("127.0.0.1 {h}"), "no"),
            None => ("127.0.0.1".into(), "yes"),
        };
        cmd.args(["--port", &self.port.to_string(), "--bind", &bind])
            .args(["--protected-mode", protected])
            .args(["--dir", self.dir.to_str().unwrap(), "--save", ""])
            // Tests move `dir` to make persistence fail.
            .args(["--enable-protected-configs", "local"]);
        if self.aof {
            cmd.args(["--appendonly", "yes", "--appendfsync", "everysec"]);
        } else {
            cmd.args(["--appendonly", "no"]);
        }
        let log = self.dir.join(format!("redis-{}.log", self.starts));
        self.pid = spawn_server(cmd, log.to_str().unwrap());
        wait_for_port(self.port, "redis-server");
    }

    /// SIGKILLs the server (no shutdown save) and waits until its port is closed.
    /// Empties it (FLUSHALL): Redis lost every timer.
    pub async fn flushall(&self) {
        let mut redis = redis::Client::open(self.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("FLUSHALL")
            .query_async(&mut redis)
            .await
            .unwrap();
    }

    pub fn kill(&mut self) {
        signal(self.pid, libc::SIGKILL);
        wait_port_closed(self.port);
    }

    /// Starts it again on the same port and directory (with the AOF, if any).
    pub fn restart(&mut self) {
        self.launch();
    }

    pub fn url(&self) -> String {
        let host = self.host.as_deref().unwrap_or("127.0.0.1");
        format!("redis://{host}:{}", self.port)
    }
}

/// A Tansu broker of one scenario: in memory (freeze it, never kill it), or on a SQLite
/// file ([`Broker::start_persistent`]: kill and restart it).
pub struct Broker {
    pub port: u16,
    /// The address it advertises to clients.
    pub host: String,
    pid: u32,
    /// The persistent broker's binary, storage URL and log directory.
    persistent: Option<(String, String, std::path::PathBuf)>,
    starts: u32,
}

/// Where a Tansu built with a persistent storage engine (SQLite) is:
/// `$KTIMER_TANSU_SQLITE_BIN`, else where `scripts/install-deps.sh --for-tests` puts it.
pub fn persistent_tansu_bin() -> String {
    let p = std::env::var("KTIMER_TANSU_SQLITE_BIN").unwrap_or_else(|_| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/ktimer/tansu-sqlite/bin/tansu")
    });
    assert!(
        std::path::Path::new(&p).exists(),
        "no Tansu with SQLite storage at {p}: run scripts/install-deps.sh --for-tests"
    );
    p
}

impl Broker {
    pub fn start(dir: &std::path::Path) -> Broker {
        Broker::start_on(dir, "127.0.0.1")
    }

    /// A broker listening on every address of this host, advertising `host`.
    pub fn start_on(dir: &std::path::Path, host: &str) -> Broker {
        let port = free_port();
        let listen = match host {
            "127.0.0.1" => format!("tcp://127.0.0.1:{port}"),
            _ => format!("tcp://0.0.0.0:{port}"),
        };
        let url = format!("tcp://{host}:{port}");
        let mut cmd = Proc::new(tansu_bin());
        cmd.args([
            "broker",
            "--listener-url",
            &listen,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", "memory://tansu/"]);
        let pid = spawn_server(cmd, dir.join("tansu.log").to_str().unwrap());
        wait_for_port(port, "tansu");
        Broker {
            port,
            host: host.to_string(),
            pid,
            persistent: None,
            starts: 1,
        }
    }

    /// A broker on 127.0.0.1 keeping its topics in a SQLite file in `dir`.
    pub fn start_persistent(dir: &std::path::Path) -> Broker {
        // Relative to the broker's working directory (`dir`, set in `restart`).
        let storage = "sqlite://tansu.db".to_string();
        let mut b = Broker {
            port: free_port(),
            host: "127.0.0.1".into(),
            pid: 0,
            persistent: Some((persistent_tansu_bin(), storage, dir.to_path_buf())),
            starts: 0,
        };
        b.restart();
        b
    }

    /// SIGKILLs a persistent broker and waits until its port is closed.
    pub fn kill(&mut self) {
        assert!(
            self.persistent.is_some(),
            "an in-memory broker loses everything"
        );
        signal(self.pid, libc::SIGKILL);
        wait_port_closed(self.port);
    }

    /// Starts a persistent broker (again) on its port and file.
    pub fn restart(&mut self) {
        let (bin, storage, dir) = self.persistent.clone().expect("a persistent broker");
        self.starts += 1;
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let mut cmd = Proc::new(bin);
        cmd.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
        ])
        .args(["--storage-engine", &storage])
        .current_dir(&dir);
        let log = dir.join(format!("tansu-{}.log", self.starts));
        self.pid = spawn_server(cmd, log.to_str().unwrap());
        wait_for_port(self.port, "tansu");
    }

    /// SIGSTOP: the broker stops answering (connections stay open, requests time out).
    pub fn freeze(&self) {
        signal(self.pid, libc::SIGSTOP);
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        signal(self.pid, libc::SIGCONT);
    }
}

/// A scenario's own servers and scratch directory.
pub struct World {
    pub dir: std::path::PathBuf,
    pub redis: Redis,
    pub broker: Broker,
}

impl World {
    pub fn start(name: &str, aof: bool) -> World {
        World::start_on(name, aof, None, "127.0.0.1")
    }

    /// Like [`World::start`], Redis also on `redis_host`, the broker advertising
    /// `broker_host` (addresses of this host, see [`super::netns::Netns`]).
    pub fn start_on(name: &str, aof: bool, redis_host: Option<&str>, broker_host: &str) -> World {
        let dir = World::scratch(name);
        let redis = Redis::start_on(&dir, aof, redis_host);
        let broker = Broker::start_on(&dir, broker_host);
        World { dir, redis, broker }
    }

    /// Like [`World::start`], the broker on a SQLite file ([`Broker::start_persistent`]).
    pub fn start_persistent(name: &str, aof: bool) -> World {
        let dir = World::scratch(name);
        let redis = Redis::start(&dir, aof);
        let broker = Broker::start_persistent(&dir);
        World { dir, redis, broker }
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("ktimer-fault-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    pub fn servers(&self) -> Servers {
        Servers {
            redis_url: self.redis.url(),
            brokers: format!("{}:{}", self.broker.host, self.broker.port),
        }
    }
}

impl Drop for World {
    /// A scenario that passed leaves nothing behind: its servers stop and its directory
    /// (AOF files of tens of MB, logs) goes. A failed one keeps them to look at.
    fn drop(&mut self) {
        if std::thread::panicking() {
            return;
        }
        // (A server the scenario already killed is not signalled again: its pid may be
        // another process's by now.)
        if std::net::TcpStream::connect(("127.0.0.1", self.redis.port)).is_ok() {
            self.redis.kill();
        }
        signal(self.broker.pid, libc::SIGKILL);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
