//! One test's topics, group and key prefix on the shared servers, and ktimer instances
//! started in the test's own process ([`InProcess`]; [`super::child::ChildProcess`] is
//! the other kind).

use super::collected::{Collected, Fired};
use super::servers::{servers, unique, Servers};
use clap::Parser;
use ktimer::command::TimerCommand;
use ktimer::config::{Cli, Command, RunArgs};
use ktimer::shutdown::CancellationToken;
use ktimer::sink::headers;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::ClientConfig;
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::mpsc;

/// One test's world: its topics, group and key prefix on the shared servers.
pub struct TestEnv {
    pub name: String,
    pub args: RunArgs,
    /// The `ktimer run ...` command line of `args` (to start child processes).
    pub argv: Vec<String>,
    pub producer: FutureProducer,
}

/// A ktimer instance running in the test's process (`ktimer::service::run` on a task).
pub struct InProcess {
    token: CancellationToken,
    join: tokio::task::JoinHandle<anyhow::Result<()>>,
    pub status: tokio::sync::watch::Receiver<ktimer::status::Status>,
}

impl InProcess {
    /// Stops the instance the way SIGTERM does and waits for it to drain.
    pub async fn stop(self) {
        self.token.cancel();
        self.join.await.expect("join").expect("service result");
    }

    /// `ktimer_fires_total` of `outcome` (0 when absent).
    pub fn fires(&self, outcome: &str) -> f64 {
        let name = format!("ktimer_fires_total{{outcome=\"{outcome}\"}}");
        self.metric(&name).unwrap_or(0.0)
    }

    /// The value of a metric from the instance's `/metrics` (see
    /// [`super::world::metric_in`]); `None` if absent.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let admin = self.status.borrow().admin_addr?.to_string();
        let (_, body) = super::world::http_get(&admin, "/metrics")?;
        super::world::metric_in(&body, name)
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
                .with_ansi(false)
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
            ("--state-topic", "state"),
            ("--delay-topic", "delay"),
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
            &k.state_topic,
            &k.delay_topic,
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
            ktimer::topics::apply(&ktimer::kafka::client(k), &specs)
                .await
                .expect("create topics");
        }
        // Keys go where ktimer expects them (its default partitioner, Java's murmur2).
        let producer = ClientConfig::new()
            .set("bootstrap.servers", &s.brokers)
            .set("partitioner", "murmur2_random")
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
    pub async fn start(&self) -> InProcess {
        self.start_with(self.args.clone()).await
    }

    /// Like [`TestEnv::start`], with `args` (this environment's, changed).
    pub async fn start_with(&self, args: RunArgs) -> InProcess {
        let token = CancellationToken::new();
        let (tx, mut status) = tokio::sync::watch::channel(Default::default());
        let join = tokio::spawn(ktimer::service::run(args, token.clone(), tx));
        tokio::time::timeout(Duration::from_secs(60), status.wait_for(|s| s.joined))
            .await
            .expect("ktimer joined the group within 60 s")
            .expect("ktimer is running");
        InProcess {
            token,
            join,
            status,
        }
    }

    /// The flags naming this environment's topics (`--commands-topic NAME ...`), as
    /// `ktimer run`, `topics apply` and `check` take them.
    pub fn topic_flags(&self) -> Vec<String> {
        let k = &self.args.kafka;
        [
            ("--commands-topic", &k.commands_topic),
            ("--results-topic", &k.results_topic),
            ("--fired-topic", &k.fired_topic),
            ("--dead-letter-topic", &k.dead_letter_topic),
            ("--state-topic", &k.state_topic),
            ("--delay-topic", &k.delay_topic),
        ]
        .iter()
        .flat_map(|(flag, name)| [flag.to_string(), name.to_string()])
        .collect()
    }

    /// A consumer of the fired and results topics from their beginning, feeding channels.
    pub fn collect(&self) -> Collected {
        let k = &self.args.kafka;
        self.collect_from(&k.fired_topic, &k.results_topic)
    }

    /// A consumer of `fired_topic` and `results_topic` from their beginning.
    pub fn collect_from(&self, fired_topic: &str, results_topic: &str) -> Collected {
        let k = &self.args.kafka;
        let consumer: StreamConsumer = ktimer::client::assigned_consumer(
            k,
            &[fired_topic.to_string(), results_topic.to_string()],
            true,
        )
        .expect("collector");
        let (ftx, frx) = mpsc::unbounded_channel();
        let (rtx, rrx) = mpsc::unbounded_channel();
        let codec = ktimer::codec::Codec::new(k.schema_registry_url.as_deref()).unwrap();
        let results_topic = results_topic.to_string();
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

    /// Has `cmd` accepted by an instance of today's settings, stops it, and lowers the
    /// producer's record limit to `bytes` for the instances started next: a timer accepted
    /// before its operator lowered a limit, which no retry can deliver or checkpoint whole.
    pub async fn accept_then_limit(&mut self, cmd: &TimerCommand, bytes: usize) {
        let mut got = self.collect();
        let svc = self.start().await;
        self.send(cmd, None).await;
        let r = got.results(1, Duration::from_secs(60)).await.remove(0);
        assert_eq!(r.outcome, ktimer::command::Outcome::Accepted, "{r:?}");
        svc.stop().await;
        // Fired already (without the limit), it would never meet the limit.
        let left = cmd.at_ms.map(|at| at - ktimer::now_ms());
        assert!(
            left.is_none_or(|l| l > 1_000),
            "the first instance took too long: {left:?} ms left before the timer is due"
        );
        let limit = format!("message.max.bytes={bytes}");
        self.argv.extend(["--kafka-option".to_string(), limit]);
        let limit = ("message.max.bytes".to_string(), bytes.to_string());
        self.args.kafka.kafka_options.push(limit);
    }

    /// Waits until the last checkpoint of each of `partitions` on the state topic says
    /// that every fire due at or before `due_ms` was acknowledged (none of them in
    /// flight); fails after `limit`. (A partition writes a checkpoint only when something
    /// changed: one with no fires keeps an older watermark, rightly.)
    pub async fn checkpointed_through(&self, partitions: &[i32], due_ms: i64, limit: Duration) {
        let state = self.args.kafka.state_topic.clone();
        self.checkpointed_through_on(&state, partitions, due_ms, limit)
            .await
    }

    /// Like [`TestEnv::checkpointed_through`], on the state topic `state_topic` (a bound
    /// application's).
    pub async fn checkpointed_through_on(
        &self,
        state_topic: &str,
        partitions: &[i32],
        due_ms: i64,
        limit: Duration,
    ) {
        let k = &self.args.kafka;
        let consumer: StreamConsumer =
            ktimer::client::assigned_consumer(k, &[state_topic.to_string()], true)
                .expect("state reader");
        let covers = |c: &ktimer::timer::Checkpoint| {
            c.acked_through_ms >= due_ms
                && c.in_flight.iter().all(|m| {
                    let due = m.split(':').nth(1).and_then(|d| d.parse::<i64>().ok());
                    due.is_some_and(|d| d > due_ms)
                })
        };
        let mut last = HashMap::new();
        let wait = async {
            while !partitions.iter().all(|p| last.get(p).is_some_and(covers)) {
                let m = consumer.recv().await.expect("state record");
                if m.key().is_some_and(|k| k.is_empty()) {
                    let c = ktimer::codec::decode_checkpoint(m.payload().unwrap_or_default())
                        .expect("checkpoint decodes");
                    last.insert(m.partition(), c);
                }
            }
        };
        if tokio::time::timeout(limit, wait).await.is_err() {
            panic!("no checkpoint through {due_ms} on partitions {partitions:?} in {limit:?}: {last:?}");
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
        self.send_many_at(cmds, None).await
    }

    /// Like [`TestEnv::send_many`], the records stamped `timestamp_ms` (a producer's
    /// clock) when given.
    pub async fn send_many_at(&self, cmds: &[TimerCommand], timestamp_ms: Option<i64>) {
        let topic = self.args.kafka.commands_topic.clone();
        self.send_many_to(&topic, cmds, timestamp_ms).await
    }

    /// Like [`TestEnv::send_many_at`], to the commands topic `topic` (a bound
    /// application's).
    pub async fn send_many_to(
        &self,
        topic: &str,
        cmds: &[TimerCommand],
        timestamp_ms: Option<i64>,
    ) {
        let codec = ktimer::codec::Codec::new(None).unwrap();
        let mut encoded = Vec::with_capacity(cmds.len());
        for c in cmds {
            encoded.push(codec.encode_command(c, topic).await.unwrap());
        }
        let sends = cmds.iter().zip(&encoded).map(|(c, bytes)| {
            let mut rec = FutureRecord::<str, [u8]>::to(topic)
                .key(&c.timer_id)
                .payload(bytes);
            if let Some(ts) = timestamp_ms {
                rec = rec.timestamp(ts);
            }
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
