//! ktimer instances as child processes (`ktimer run`), so a test can kill them with
//! SIGKILL, freeze them with SIGSTOP or stop them with SIGTERM.

use super::world::{http_get, signal};
use super::{free_port, TestEnv};
use std::process::{Child, Command as Proc, Stdio};
use std::time::Duration;

/// A ktimer instance running as a child process.
pub struct ChildProcess {
    child: Child,
    pub admin_port: u16,
    /// The address its admin port listens on.
    admin_host: String,
}

impl ChildProcess {
    /// Starts `ktimer run` with the environment's flags plus `extra`, logging to `log`.
    pub fn spawn(env: &TestEnv, extra: &[&str], log: &std::path::Path) -> ChildProcess {
        ChildProcess::spawn_in(&[], "127.0.0.1", env, extra, log)
    }

    /// Like [`ChildProcess::spawn`], run through `prefix` (e.g. `ip netns exec NAME`), its
    /// admin port on `admin_host`.
    pub fn spawn_in(
        prefix: &[String],
        admin_host: &str,
        env: &TestEnv,
        extra: &[&str],
        log: &std::path::Path,
    ) -> ChildProcess {
        let admin_port = free_port();
        let log = std::fs::File::create(log).expect("log file");
        // KTIMER_TEST_BIN: another build (a release binary for measurements).
        let bin = std::env::var("KTIMER_TEST_BIN").unwrap_or(env!("CARGO_BIN_EXE_ktimer").into());
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Proc::new(first);
                c.args(rest).arg(bin);
                c
            }
            None => Proc::new(bin),
        };
        cmd.args(&env.argv[1..])
            .args(["--admin-addr", &format!("{admin_host}:{admin_port}")])
            .args(extra)
            .env("KTIMER_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        let child = cmd.spawn().expect("spawn ktimer");
        super::servers::CHILDREN.lock().unwrap().push(child.id());
        ChildProcess {
            child,
            admin_port,
            admin_host: admin_host.to_string(),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// An admin endpoint's status and body, if the instance answers.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(&format!("{}:{}", self.admin_host, self.admin_port), path)
    }

    /// Waits until the instance joined the group (`/readyz` answers 200).
    pub async fn ready(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while tokio::time::Instant::now() < deadline {
            if matches!(self.get("/readyz"), Some((200, _))) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("ktimer {} not ready within {limit:?}", self.pid());
    }

    /// The value of a metric (summed over its labels) from `/metrics`.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics")?;
        super::world::metric_in(&body, name)
    }

    /// The partitions the instance owns now (`/status`), if it answers.
    pub fn owned(&self) -> Option<Vec<i32>> {
        let (code, body) = self.get("/status")?;
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        (code == 200).then(|| {
            v["owned"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p.as_i64())
                        .map(|p| p as i32)
                        .collect()
                })
                .unwrap_or_default()
        })
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    pub fn kill9(&mut self) {
        signal(self.pid(), libc::SIGKILL);
        let _ = self.child.wait();
    }

    pub fn freeze(&self) {
        signal(self.pid(), libc::SIGSTOP);
    }

    pub fn thaw(&self) {
        signal(self.pid(), libc::SIGCONT);
    }

    /// SIGTERM, then waits for the exit; returns its exit status and how long it took.
    pub fn terminate(&mut self) -> (std::process::ExitStatus, Duration) {
        let t = std::time::Instant::now();
        signal(self.pid(), libc::SIGTERM);
        let st = self.child.wait().expect("wait");
        (st, t.elapsed())
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
