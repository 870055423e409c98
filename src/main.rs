//! The `ktimer` binary: parses the command line and hands over to the library.

use clap::Parser;
use ktimer::config::{Cli, Command, LogFormat, TopicsApplyArgs, TopicsCommand};
use ktimer::{bench, check, client, service, shutdown, topics};
use tracing_subscriber::EnvFilter;

/// mimalloc: the profile of a loaded instance spent a quarter of its time in glibc's
/// malloc and free (small records, Redis replies, librdkafka buffers).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let filter = EnvFilter::try_new(&cli.log).unwrap_or_else(|_| EnvFilter::new("info"));
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => logs.init(),
        LogFormat::Json => logs.json().init(),
    }
    match cli.command {
        Command::Run(args) => {
            shutdown::exit_on_panic();
            let (status, _) = tokio::sync::watch::channel(ktimer::status::Status::default());
            let token = shutdown::on_signals();
            let deadline = std::time::Duration::from_millis(args.shutdown_timeout_ms);
            let run = service::run(args, token.clone(), status);
            match shutdown::within_deadline(run, &token, deadline).await {
                Some(r) => r,
                None => anyhow::bail!(
                    "the drain took longer than {deadline:?}; exiting (unfinished fires stay in flight for the next owner)"
                ),
            }
        }
        Command::Topics(TopicsCommand::Apply(args)) => apply_topics(args).await,
        Command::Send(args) => client::send(args).await,
        Command::Tail(args) => client::tail(args).await,
        Command::Timers(args) => ktimer::admin::cli::run(args).await,
        Command::Next(args) => ktimer::preview::run(args),
        Command::Bench(args) => bench::run(args, shutdown::on_signals()).await,
        Command::Check(args) => match check::run(args).await {
            true => Ok(()),
            false => std::process::exit(1),
        },
    }
}

/// `ktimer topics apply`: names each declared topic after its role's flag, then applies.
async fn apply_topics(args: TopicsApplyArgs) -> anyhow::Result<()> {
    let mut specs = match &args.file {
        Some(path) => topics::load(path)?,
        None => topics::builtin(),
    };
    let k = &args.kafka;
    let roles = k.roles();
    // A role turned off (an empty delay topic) is not created.
    specs.retain(|s| s.role != "delay" || !k.delay_topic.is_empty());
    for s in &mut specs {
        if let Some((_, name)) = roles.iter().find(|(role, _)| *role == s.role) {
            s.name = name.to_string();
        }
        if let Some(p) = args.partitions {
            s.partitions = p;
        }
    }
    let apps = args.applications.clone().unwrap_or_default().current();
    let lanes = ktimer::lanes::Lanes::new(k, &apps).map_err(anyhow::Error::msg)?;
    for (role, name) in lanes.bound_roles() {
        let like = specs.iter().find(|s| s.role == role);
        let Some(mut spec) = like.cloned() else {
            anyhow::bail!("no topic of role {role} is declared: {name} cannot be created like it");
        };
        spec.name = name;
        specs.push(spec);
    }
    for (spec, applied) in topics::apply(&ktimer::kafka::client(k), &specs).await? {
        let what = match applied {
            topics::Applied::Created => format!("created with {} partitions", spec.partitions),
            topics::Applied::Exists(n) => format!("exists with {n} partitions"),
            topics::Applied::FewerPartitions(n) => format!(
                "exists with {n} partitions, fewer than the {} declared; left unchanged (raising it would move timers between partitions)",
                spec.partitions
            ),
        };
        println!("topic {:<28} ({:<11}) {what}", spec.name, spec.role);
    }
    Ok(())
}
