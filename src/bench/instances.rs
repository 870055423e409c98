//! The ktimer instances a bench starts: `ktimer run` child processes, so that their CPU
//! and memory are theirs alone (the bench's producers and consumers run elsewhere).

use super::nodes::Sample;
use anyhow::Context;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// What an instance's admin port says about it (`GET /status`).
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct InstanceStatus {
    /// The commands-topic partitions it owns.
    pub owned: Vec<i32>,
    /// Per partition taken without a rebuild, ms from its assignment to its trigger.
    #[serde(default)]
    pub taken_ms: BTreeMap<i32, u64>,
    /// The partitions it owns per commands topic (every lane's).
    #[serde(default)]
    pub lanes: BTreeMap<String, Vec<i32>>,
}

/// One `ktimer run` child process.
struct Instance {
    child: Child,
    admin: String,
}

/// The running instances of a bench.
#[derive(Default)]
pub struct Instances {
    running: Vec<Instance>,
    http: reqwest::Client,
    /// The executable they run; none: this one.
    exe: Option<PathBuf>,
}

impl Instances {
    /// No instances yet; those started will run `exe` (none: this executable).
    pub fn new(exe: Option<PathBuf>) -> Self {
        Instances {
            running: Vec::new(),
            http: reqwest::Client::default(),
            exe,
        }
    }

    /// Starts `n` instances with `ktimer run`'s flags `argv` (an admin port of their own
    /// each), and waits until together they own `partitions` of each commands topic of
    /// `topics`, at most 120 s.
    pub async fn start(
        &mut self,
        argv: &[String],
        n: usize,
        partitions: i32,
        topics: &[String],
    ) -> anyhow::Result<()> {
        let exe = match &self.exe {
            Some(exe) => exe.clone(),
            None => std::env::current_exe().context("the ktimer executable")?,
        };
        for _ in 0..n {
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let admin = format!("127.0.0.1:{port}");
            let child = Command::new(&exe)
                .arg("run")
                .args(argv)
                .args(["--admin-addr", &admin])
                .stdin(Stdio::null())
                .spawn()
                .context("starting ktimer run")?;
            self.running.push(Instance { child, admin });
        }
        let want: BTreeSet<(&str, i32)> = topics
            .iter()
            .flat_map(|t| (0..partitions).map(move |p| (t.as_str(), p)))
            .collect();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
        loop {
            let statuses = self.statuses().await;
            let owned: BTreeSet<(&str, i32)> = statuses
                .iter()
                .flat_map(|s| &s.lanes)
                .flat_map(|(t, ps)| ps.iter().map(move |p| (t.as_str(), *p)))
                .collect();
            if owned == want {
                return Ok(());
            }
            for i in &mut self.running {
                if let Some(code) = i.child.try_wait()? {
                    anyhow::bail!("a ktimer instance ended ({code}) before owning its partitions");
                }
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "the instances own {owned:?} of {want:?} after 120 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every instance's status (a default one for an instance not answering yet).
    pub async fn statuses(&self) -> Vec<InstanceStatus> {
        let mut out = Vec::new();
        for i in &self.running {
            let url = format!("http://{}/status", i.admin);
            let st = match self.http.get(&url).send().await {
                Ok(r) => r.json().await.unwrap_or_default(),
                Err(_) => InstanceStatus::default(),
            };
            out.push(st);
        }
        out
    }

    /// CPU the running instances used so far (user + system, `/proc/PID/stat`), as
    /// the sample of one node named `ktimer`; none when the bench started none.
    pub fn cpu(&self) -> Option<Sample> {
        (!self.running.is_empty()).then(|| Sample {
            node: "ktimer".into(),
            used_memory: 0,
            cpu_s: self.running.iter().map(|i| cpu_s(i.child.id())).sum(),
            keyspace_calls: 0,
            fcalls: 0,
        })
    }

    /// The highest peak resident memory (`VmHWM`) of the running instances, MB.
    pub fn peak_rss_mb(&self) -> Option<f64> {
        self.running
            .iter()
            .filter_map(|i| status_kb(i.child.id(), "VmHWM:"))
            .map(|kb| (kb / 1024.0).round())
            .reduce(f64::max)
    }

    /// Stops every instance with SIGTERM (their drain) and waits for them to exit;
    /// fails if one did not exit cleanly.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        let mut failed = Vec::new();
        for mut i in self.running.drain(..) {
            // SAFETY: kill(2) with a pid this process spawned and has not reaped.
            unsafe { libc::kill(i.child.id() as libc::pid_t, libc::SIGTERM) };
            let status = tokio::task::spawn_blocking(move || i.child.wait()).await??;
            if !status.success() {
                failed.push(status.to_string());
            }
        }
        anyhow::ensure!(failed.is_empty(), "instances ended with {failed:?}");
        Ok(())
    }
}

impl Drop for Instances {
    /// Instances still running when the bench ends abruptly are killed.
    fn drop(&mut self) {
        for i in &mut self.running {
            let _ = i.child.kill();
            let _ = i.child.wait();
        }
    }
}

/// User + system CPU of process `pid`, seconds (0 when it is gone).
pub(super) fn cpu_s(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat(5); `rest` starts at field 3.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    (ticks(11) + ticks(12)) / hz
}

/// A `kB` field of `/proc/PID/status`.
fn status_kb(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_has_used_cpu_and_memory() {
        let pid = std::process::id();
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(0u64);
        }
        assert!(cpu_s(pid) > 0.0);
        assert!(status_kb(pid, "VmHWM:").unwrap() > 0.0);
        assert_eq!(cpu_s(u32::MAX), 0.0);
    }
}
