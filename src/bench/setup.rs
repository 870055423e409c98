//! The bench's surroundings: fresh topics, the instances it starts, Redis, clean-up.

use super::instances::{InstanceStatus, Instances};
use super::nodes::Nodes;
use crate::config::{BenchArgs, KafkaArgs, RunArgs};
use crate::store::Store;
use crate::topics::{self, TopicSpec};
use anyhow::Context;
use clap::Parser;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;
use std::time::Duration;

/// `ktimer run`'s flags on their own, to build the started instances' configuration
/// exactly as the command line would (environment variables included).
#[derive(Parser)]
struct RunCli {
    #[command(flatten)]
    run: RunArgs,
}

/// The topics, instances and Redis of one bench run.
pub struct Env {
    /// Run id: every topic, key and timer id of the run carries it.
    pub run: String,
    /// Broker and the topics the bench drives (fresh ones unless `--instances 0`; with
    /// `--bound`, the bound application's).
    pub kafka: KafkaArgs,
    /// The started instances' shared topics (the same as `kafka` unless `--bound`).
    instance_kafka: KafkaArgs,
    /// With `--bound`, the applications file binding `bench` to its topics.
    applications: Option<std::path::PathBuf>,
    /// How the load is sent (`--via`).
    pub via: crate::config::Via,
    /// The fresh callback topic of the bench's timers.
    pub callback: String,
    /// The pass-through baseline's input and output topics.
    pub pipe_in: String,
    /// See `pipe_in`.
    pub pipe_out: String,
    /// The command-shaped baseline's input and output topics.
    pub command_pipe: (String, String),
    /// The Redis primaries of the instances (memory and CPU are measured there).
    pub nodes: Nodes,
    /// `--redis-url`.
    pub redis_url: String,
    /// Redis key prefix of the started instances (`None` for running instances).
    pub prefix: Option<String>,
    /// The instances the bench started (none with `--instances 0`).
    pub instances: Instances,
    /// The run's producer of commands ([`super::load::ready`]).
    pub commands: rdkafka::producer::FutureProducer,
    /// The pass-through pipes' producer, with ktimer's settings ([`super::load::ready`]).
    pub pipe_producer: rdkafka::producer::FutureProducer,
    created: Vec<String>,
}

/// A short id unique to this run.
pub fn run_id() -> String {
    format!(
        "{:x}{:x}",
        crate::now_ms() % 0x1_0000_0000,
        std::process::id() % 0x1000
    )
}

impl Env {
    /// Creates the topics and starts the instances (`--instances`), waiting until they
    /// own every partition of the commands topic.
    pub async fn prepare(args: &BenchArgs, run: &str) -> anyhow::Result<Env> {
        let base = format!("ktimer-bench-{run}");
        let mut kafka = args.kafka.clone();
        let own = args.instances > 0;
        if own {
            kafka.commands_topic = format!("{base}.commands");
            kafka.results_topic = format!("{base}.results");
            kafka.fired_topic = format!("{base}.fired");
            kafka.dead_letter_topic = format!("{base}.dead-letter");
            kafka.state_topic = format!("{base}.state");
            kafka.delay_topic = format!("{base}.delay");
        }
        let callback = format!("{base}.callback");
        let (pipe_in, pipe_out) = (format!("{base}.pipe-in"), format!("{base}.pipe-out"));
        let command_pipe = (
            format!("{base}.cmd-pipe-in"),
            format!("{base}.cmd-pipe-out"),
        );
        let mut names = vec![
            callback.clone(),
            pipe_in.clone(),
            pipe_out.clone(),
            command_pipe.0.clone(),
            command_pipe.1.clone(),
        ];
        if own {
            names.extend([
                kafka.commands_topic.clone(),
                kafka.results_topic.clone(),
                kafka.fired_topic.clone(),
                kafka.dead_letter_topic.clone(),
                kafka.state_topic.clone(),
                kafka.delay_topic.clone(),
            ]);
        }
        let specs: Vec<TopicSpec> = names
            .iter()
            .map(|n| TopicSpec {
                role: "bench".into(),
                name: n.clone(),
                partitions: args.partitions,
                replication_factor: 1,
                configs: Default::default(),
            })
            .collect();
        topics::apply(&crate::kafka::client(&kafka), &specs)
            .await
            .context("creating the bench topics")?;
        eprintln!(
            "bench {run}: created {} topics with {} partitions",
            names.len(),
            args.partitions
        );
        let (drive, applications) = match args.bound {
            true => {
                anyhow::ensure!(
                    own,
                    "--bound needs instances the bench starts (--instances 1 or more)"
                );
                anyhow::ensure!(
                    args.via == crate::config::Via::Commands,
                    "--bound drives the bound application's commands topic: not with --via delay-topic"
                );
                let (drive, file, topics) = bind(&kafka, &base)?;
                let specs = topics.iter().map(|n| TopicSpec {
                    role: "bench".into(),
                    name: n.clone(),
                    partitions: args.partitions,
                    replication_factor: 1,
                    configs: Default::default(),
                });
                topics::apply(&crate::kafka::client(&kafka), &specs.collect::<Vec<_>>())
                    .await
                    .context("creating the bound application's topics")?;
                names.extend(topics);
                (drive, Some(file))
            }
            false => (kafka.clone(), None),
        };
        let nodes = Nodes::connect(&args.redis_url).await?;
        let to = match args.via {
            crate::config::Via::Commands => &drive.commands_topic,
            crate::config::Via::DelayTopic => &drive.delay_topic,
        };
        let commands = super::load::ready(super::load::producer(&drive)?, &[to]).await?;
        let pipe = crate::kafka::producer(&drive).create()?;
        let pipe_producer = super::load::ready(pipe, &[&pipe_out, &command_pipe.1]).await?;
        let mut env = Env {
            run: run.to_string(),
            kafka: drive,
            instance_kafka: kafka,
            applications,
            via: args.via,
            callback,
            pipe_in,
            pipe_out,
            command_pipe,
            nodes,
            redis_url: args.redis_url.clone(),
            prefix: own.then(|| base.clone()),
            created: names,
            instances: Instances::new(args.instance_bin.clone()),
            commands,
            pipe_producer,
        };
        if own {
            env.start(args, &base).await?;
        } else {
            env.check_running().await?;
        }
        Ok(env)
    }

    async fn start(&mut self, args: &BenchArgs, base: &str) -> anyhow::Result<()> {
        let k = &self.instance_kafka;
        let mut argv: Vec<String> = [
            "--brokers",
            &k.brokers,
            "--commands-topic",
            &k.commands_topic,
            "--results-topic",
            &k.results_topic,
            "--fired-topic",
            &k.fired_topic,
            "--dead-letter-topic",
            &k.dead_letter_topic,
            "--state-topic",
            &k.state_topic,
            "--delay-topic",
            &k.delay_topic,
            "--redis-url",
            &args.redis_url,
            "--redis-prefix",
            base,
            "--group-id",
            base,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(url) = &k.schema_registry_url {
            argv.extend(["--schema-registry-url".into(), url.clone()]);
        }
        for (key, v) in &k.kafka_options {
            argv.extend(["--kafka-option".into(), format!("{key}={v}")]);
        }
        if let Some(file) = &self.applications {
            argv.extend(["--applications".into(), file.to_string_lossy().into_owned()]);
        }
        argv.extend(args.instance_args.iter().cloned());
        // The flags are checked here, where a mistake is reported once and clearly.
        let mut check = vec!["ktimer-run".to_string()];
        check.extend(argv.iter().cloned());
        RunCli::try_parse_from(&check).context("the --instance-arg flags")?;
        eprintln!(
            "bench {}: starting {} ktimer instance(s); waiting until they own the {} partitions",
            self.run, args.instances, args.partitions
        );
        let mut lanes = vec![k.commands_topic.clone()];
        if self.applications.is_some() {
            lanes.push(self.kafka.commands_topic.clone());
        }
        self.instances
            .start(&argv, args.instances, args.partitions, &lanes)
            .await
    }

    async fn check_running(&self) -> anyhow::Result<()> {
        let k = self.kafka.clone();
        tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
            let c: rdkafka::consumer::BaseConsumer = crate::kafka::client(&k).create()?;
            for t in [&k.commands_topic, &k.results_topic] {
                anyhow::ensure!(
                    topics::partition_count(&c, t)? > 0,
                    "topic {t:?} does not exist: with --instances 0, --commands-topic and \
                     --results-topic name the running instances' topics"
                );
            }
            Ok(())
        })
        .await?
    }

    /// Waits until the state topic holds every change to the timers of the started
    /// instances (`partitions` partitions), at most `limit`.
    pub async fn checkpointed(&self, partitions: i32, limit: Duration) -> anyhow::Result<()> {
        let prefix = self
            .prefix
            .as_deref()
            .context("the checkpoints are watched on instances the bench starts")?;
        let topic = &self.kafka.commands_topic;
        let store = Store::connect(&self.redis_url, prefix, topic, 0).await?;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let mut left = 0;
            for p in 0..partitions {
                left += store.unwritten(p).await?;
            }
            if left == 0 {
                return Ok(());
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "checkpoints did not catch up in {limit:?} ({left} timers unwritten)"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Stops the started instances (SIGTERM's drain) and starts as many again, waiting
    /// until they own the partitions; answers the new instances' statuses.
    pub async fn restart(&mut self, args: &BenchArgs) -> anyhow::Result<Vec<InstanceStatus>> {
        let base = self.prefix.clone().context("instances the bench starts")?;
        self.instances.stop().await?;
        self.start(args, &base).await?;
        Ok(self.instances.statuses().await)
    }

    /// Stops the started instances (draining them), then deletes what the run created
    /// unless `keep`.
    pub async fn teardown(mut self, keep: bool) {
        if let Err(e) = self.instances.stop().await {
            eprintln!("bench: {e:#}");
        }
        if keep {
            eprintln!(
                "bench {}: kept topics {} and Redis keys {}:*",
                self.run,
                self.created.join(", "),
                self.prefix
                    .as_deref()
                    .unwrap_or("(of the running instances)")
            );
            return;
        }
        if let Some(file) = &self.applications {
            let _ = std::fs::remove_file(file);
        }
        if let Err(e) = delete_topics(&self.kafka, &self.created).await {
            eprintln!("bench: deleting the topics failed: {e:#}");
        }
        if let Some(prefix) = &self.prefix {
            match self.nodes.delete_keys(prefix).await {
                Ok(n) => eprintln!("bench {}: deleted {n} Redis keys", self.run),
                Err(e) => eprintln!("bench: deleting the Redis keys failed: {e:#}"),
            }
        }
    }
}

/// `kafka` with the topics of application `bench` bound to topics of its own (under
/// `base`), the applications file that binds them, and those topics.
fn bind(
    kafka: &KafkaArgs,
    base: &str,
) -> anyhow::Result<(KafkaArgs, std::path::PathBuf, Vec<String>)> {
    let mut k = kafka.clone();
    k.commands_topic = format!("{base}.bound.commands");
    k.results_topic = format!("{base}.bound.results");
    k.fired_topic = format!("{base}.bound.fired");
    k.state_topic = format!("{base}.bound.state");
    k.dead_letter_topic = format!("{base}.bound.dead-letter");
    let text = format!(
        "[applications.bench.topics]\ncommands = {:?}\nresults = {:?}\nfired = {:?}\nstate = {:?}\ndead_letter = {:?}\n",
        k.commands_topic, k.results_topic, k.fired_topic, k.state_topic, k.dead_letter_topic
    );
    let file = std::env::temp_dir().join(format!("{base}.applications.toml"));
    std::fs::write(&file, text).context("writing the bench's applications file")?;
    let topics = vec![
        k.commands_topic.clone(),
        k.results_topic.clone(),
        k.fired_topic.clone(),
        k.state_topic.clone(),
        k.dead_letter_topic.clone(),
    ];
    Ok((k, file, topics))
}

async fn delete_topics(kafka: &KafkaArgs, names: &[String]) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = crate::kafka::client(kafka).create()?;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    for r in admin.delete_topics(&names, &AdminOptions::new()).await? {
        if let Err((t, code)) = r {
            eprintln!("bench: topic {t} not deleted: {code}");
        }
    }
    Ok(())
}
