//! A real Redis Cluster of Debian's `redis-server` processes on free loopback ports,
//! created with `redis-cli --cluster create` (primaries, optionally one replica each).

use super::{free_port, spawn_server, wait_for_port};
use std::process::Command as Proc;
use std::time::{Duration, Instant};

/// One node of the cluster.
pub struct Node {
    pub port: u16,
    pub pid: u32,
}

/// A running cluster; its processes die with the test binary.
pub struct Cluster {
    pub nodes: Vec<Node>,
}

fn redis_bin(name: &str) -> String {
    let server = std::env::var("KTIMER_REDIS_SERVER_BIN").unwrap_or("redis-server".into());
    if name == "redis-server" {
        server
    } else {
        server.replace("redis-server", name)
    }
}

impl Cluster {
    /// Starts `primaries` primaries with `replicas` replicas each; a node missing for
    /// `node_timeout_ms` is failed over to its replica.
    pub fn start(
        dir: &std::path::Path,
        primaries: usize,
        replicas: usize,
        node_timeout_ms: u64,
    ) -> Cluster {
        std::fs::create_dir_all(dir).unwrap();
        let mut nodes = Vec::new();
        for _ in 0..primaries * (1 + replicas) {
            let port = free_port();
            let mut p = Proc::new(redis_bin("redis-server"));
            p.current_dir(dir).args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &format!("nodes-{port}.conf"),
                "--cluster-node-timeout",
                &node_timeout_ms.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
            ]);
            let pid = spawn_server(p, dir.join(format!("redis-{port}.log")).to_str().unwrap());
            nodes.push(Node { port, pid });
        }
        for n in &nodes {
            wait_for_port(n.port, "redis-server (cluster node)");
        }
        let mut create = Proc::new(redis_bin("redis-cli"));
        create.arg("--cluster").arg("create");
        for n in &nodes {
            create.arg(format!("127.0.0.1:{}", n.port));
        }
        let out = create
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let cluster = Cluster { nodes };
        cluster.wait_ok(Duration::from_secs(30));
        cluster
    }

    /// The seed URLs, comma separated (what `--redis-url` takes).
    pub fn url(&self) -> String {
        let urls: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect();
        urls.join(",")
    }

    fn query<T: redis::FromRedisValue>(port: u16, args: &[&str]) -> Option<T> {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
        let mut c = client
            .get_connection_with_timeout(Duration::from_secs(1))
            .ok()?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(&mut c).ok()
    }

    /// Waits until every live node reports `cluster_state:ok` and every slot is served
    /// by a live primary.
    pub fn wait_ok(&self, within: Duration) {
        let start = Instant::now();
        while start.elapsed() < within {
            let ok = self.nodes.iter().filter(|n| n.pid != 0).all(|n| {
                Cluster::query::<String>(n.port, &["CLUSTER", "INFO"])
                    .is_some_and(|i| i.contains("cluster_state:ok"))
            });
            if ok && self.covered() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the cluster did not reach cluster_state:ok");
    }

    /// Whether the live primaries serve all 16384 slots.
    fn covered(&self) -> bool {
        let live = self.primaries();
        let served: i64 = self
            .slot_map()
            .iter()
            .filter(|(port, _)| live.contains(port))
            .flat_map(|(_, ranges)| ranges.iter().map(|(a, b)| b - a + 1))
            .sum();
        served == 16384
    }

    /// Each primary not marked failed (`CLUSTER NODES`): its port and its slot ranges.
    fn slot_map(&self) -> Vec<(u16, Vec<(i64, i64)>)> {
        let Some(nodes) = self.any::<String>(&["CLUSTER", "NODES"]) else {
            return vec![];
        };
        nodes
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .filter(|f| f[2].contains("master") && !f[2].contains("fail"))
            .filter_map(|f| {
                let port = f[1].split(['@', ':']).nth(1)?.parse().ok()?;
                let ranges = f[8..]
                    .iter()
                    .filter_map(|r| {
                        let mut ends = r.split('-').filter_map(|x| x.parse::<i64>().ok());
                        let a = ends.next()?;
                        Some((a, ends.next().unwrap_or(a)))
                    })
                    .collect();
                Some((port, ranges))
            })
            .collect()
    }

    fn any<T: redis::FromRedisValue>(&self, args: &[&str]) -> Option<T> {
        self.nodes
            .iter()
            .filter(|n| n.pid != 0)
            .find_map(|n| Cluster::query(n.port, args))
    }

    /// The ports of the live nodes that are primaries (by their own `INFO replication`).
    pub fn primaries(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|n| n.pid != 0)
            .filter(|n| {
                Cluster::query::<String>(n.port, &["INFO", "replication"])
                    .is_some_and(|i| i.contains("role:master"))
            })
            .map(|n| n.port)
            .collect()
    }

    /// The port of the primary serving `key`'s slot.
    pub fn primary_of(&self, key: &str) -> u16 {
        self.primary_of_slot(self.slot_of(key))
    }

    /// Kills the node on `port` with SIGKILL.
    pub fn kill(&mut self, port: u16) {
        let n = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("node");
        unsafe {
            libc::kill(n.pid as i32, libc::SIGKILL);
        }
        n.pid = 0;
    }

    fn node_id(port: u16) -> String {
        Cluster::query::<String>(port, &["CLUSTER", "MYID"]).expect("CLUSTER MYID")
    }

    /// The slot of `key`.
    pub fn slot_of(&self, key: &str) -> i64 {
        self.any(&["CLUSTER", "KEYSLOT", key])
            .expect("CLUSTER KEYSLOT")
    }

    /// Moves `slot` from its primary to the primary on `to` the way `redis-cli --cluster
    /// reshard` does (IMPORTING/MIGRATING, MIGRATE in batches of `batch` keys, a pause of
    /// `pause` between batches, then SETSLOT NODE everywhere), so clients meet ASK, MOVED
    /// and TRYAGAIN. Returns how many keys moved.
    pub fn move_slot(&self, slot: i64, to: u16, batch: usize, pause: Duration) -> usize {
        let from = self.primary_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is on {to} already");
        let (from_id, to_id) = (Cluster::node_id(from), Cluster::node_id(to));
        let slot_s = slot.to_string();
        let set = |port: u16, args: &[&str]| {
            let mut all = vec!["CLUSTER", "SETSLOT", &slot_s];
            all.extend_from_slice(args);
            Cluster::query::<String>(port, &all).expect("CLUSTER SETSLOT")
        };
        set(to, &["IMPORTING", &from_id]);
        set(from, &["MIGRATING", &to_id]);
        let mut moved = 0;
        loop {
            let keys: Vec<String> = Cluster::query(
                from,
                &["CLUSTER", "GETKEYSINSLOT", &slot_s, &batch.to_string()],
            )
            .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let to_s = to.to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &to_s, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(String::as_str));
            let _: String = Cluster::query(from, &args).expect("MIGRATE");
            moved += keys.len();
            std::thread::sleep(pause);
        }
        for n in self.nodes.iter().filter(|n| n.pid != 0) {
            let _ =
                Cluster::query::<String>(n.port, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
        }
        moved
    }

    /// The port of the primary serving `slot`.
    pub fn primary_of_slot(&self, slot: i64) -> u16 {
        self.slot_map()
            .into_iter()
            .find(|(_, ranges)| ranges.iter().any(|(a, b)| (*a..=*b).contains(&slot)))
            .map(|(port, _)| port)
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
    }
}
