//! A second host on this machine: a network namespace joined to the test's host by a veth
//! pair (iproute2). The test's host has two addresses on its end: `host_ip` (Redis) and
//! `broker_ip` (the broker), so the namespace can lose one and keep the other: a
//! blackhole route drops what it sends to that address (its connections stay open,
//! nothing passes, as in a real partition), and replacing the route heals it.

use std::process::Command as Proc;

/// A namespace and its link to the test's host; both are removed on drop.
pub struct Netns {
    pub name: String,
    link: String,
    /// This end's address, in the namespace.
    pub ip: String,
    /// The test's host's address on the link (serve Redis here).
    pub host_ip: String,
    /// A second address of the test's host on the link (serve the broker here).
    pub broker_ip: String,
}

fn ip(args: &[&str]) {
    let out = Proc::new("ip")
        .args(args)
        .output()
        .expect("iproute2 (ip) runs");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Netns {
    /// Creates a namespace with a link to the test's host (needs root).
    pub fn new() -> Netns {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let id = (std::process::id() + N.fetch_add(1, Ordering::SeqCst)) % 250 + 1;
        let (name, link, peer) = (
            format!("ktns{id}"),
            format!("ktv{id}a"),
            format!("ktv{id}b"),
        );
        // Leftovers of a killed earlier run with the same number.
        let _ = Proc::new("ip").args(["netns", "del", &name]).output();
        let _ = Proc::new("ip").args(["link", "del", &link]).output();
        let net = format!("10.213.{id}");
        let (host_ip, mine, broker_ip) =
            (format!("{net}.1"), format!("{net}.2"), format!("{net}.5"));
        ip(&["netns", "add", &name]);
        ip(&["link", "add", &link, "type", "veth", "peer", "name", &peer]);
        ip(&["link", "set", &peer, "netns", &name]);
        ip(&["addr", "add", &format!("{host_ip}/30"), "dev", &link]);
        ip(&["addr", "add", &format!("{broker_ip}/32"), "dev", &link]);
        ip(&["link", "set", &link, "up"]);
        let ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name, "ip"];
            all.extend_from_slice(args);
            ip(&all);
        };
        ns(&["addr", "add", &format!("{mine}/30"), "dev", &peer]);
        ns(&["link", "set", &peer, "up"]);
        ns(&["link", "set", "lo", "up"]);
        ns(&["route", "add", &format!("{broker_ip}/32"), "via", &host_ip]);
        Netns {
            name,
            link,
            ip: mine,
            host_ip,
            broker_ip,
        }
    }

    /// The command prefix that runs a program in the namespace.
    pub fn exec(&self) -> Vec<String> {
        ["ip", "netns", "exec", &self.name]
            .map(String::from)
            .to_vec()
    }

    fn route(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", &self.name, "ip", "route", "replace"];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Drops everything the namespace sends to the broker's address.
    pub fn cut_broker(&self) {
        self.route(&["blackhole", &format!("{}/32", self.broker_ip)]);
    }

    /// Lets it through again.
    pub fn heal_broker(&self) {
        self.route(&[&format!("{}/32", self.broker_ip), "via", &self.host_ip]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Proc::new("ip").args(["netns", "del", &self.name]).output();
        let _ = Proc::new("ip").args(["link", "del", &self.link]).output();
    }
}
