//! `sutra bench`: drives a standard workload (SPEC §9) through an engine and reports its
//! throughput, step latency and commits per instance, beside PostgreSQL's own commit rate
//! measured in the same run.
//!
//! By default the engine runs in this process, on a scratch embedded store or, with `--db`, on
//! a scratch PostgreSQL database; with `--db` and `--replicas N` it is N `sutra serve` processes
//! over one scratch database; with `--server` it is a running server. Everything the bench
//! creates (scratch directories and databases, replicas, its workers) is gone when it ends, all
//! traffic stays on loopback, and a run is bounded by `--instances` and `--max-seconds`.

mod amqp;
mod drive;
mod latency;
mod machine;
mod postgres;
mod preload;
mod reference;
mod replicas;
mod report;
mod workload;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sutra_client::Client;
use sutra_server::config::Sources;

use crate::in_process::{ScratchDir, serve_while};
use amqp::Broker;
use drive::drive;
use latency::Recorder;
use postgres::{Activity, Admin, Mark};
use replicas::{Interruption, Replicas};
use report::{Commits, Items, Latency, Report};
use workload::Workload;

/// A settling pause before reading a running server's commit counter: its busy backends report
/// their counts about once a second.
const SETTLE: Duration = Duration::from_millis(1500);
/// A pause after the engine stopped before reading the commit counter: its connections close
/// as it stops and report their last counts a moment later.
const CLOSED: Duration = Duration::from_millis(500);
/// How long the replicas may take to load a deployment made through one of them: far above
/// the one `sutra.lease.poll` convergence takes (SPEC §7.1).
const CONVERGENCE: Duration = Duration::from_secs(30);

#[derive(clap::Args)]
pub struct Args {
    workload: Workload,
    /// PostgreSQL admin URL on loopback (e.g. postgres://postgres@127.0.0.1:5432/postgres): the
    /// in-process engine runs on a scratch database made through it; the commit counter and
    /// the pgbench reference need it. With --server it names the server's database.
    #[arg(long, value_name = "URL")]
    db: Option<String>,
    /// Instances to run to their end.
    #[arg(long, default_value_t = 1000)]
    instances: u64,
    /// Concurrent clients, each driving one instance at a time; also the worker's concurrency
    /// and the reference's pgbench clients.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Start this many instances per second, each when its time comes, however many are still
    /// running (an open loop), instead of each client starting its next instance when its last
    /// one ended; --clients then sizes the worker and the reference only. A step's latency is
    /// then what it would be at that load, not what the clients' own waiting lets it be.
    #[arg(long, value_name = "PER_SECOND")]
    rate: Option<f64>,
    /// The engine's execution lanes (sutra.engine.lanes), in process or per replica.
    #[arg(long, default_value_t = 1)]
    lanes: usize,
    /// Run the engine as this many `sutra serve` processes over one scratch database (needs
    /// --db; default 1: the engine in this process). Client i talks to replica i mod N, and
    /// each replica has a worker with its share of the concurrency.
    #[arg(long, value_name = "N")]
    replicas: Option<usize>,
    /// Stop starting instances after this many seconds, whatever is left.
    #[arg(long, default_value_t = 300)]
    max_seconds: u64,
    /// How long the pgbench reference runs.
    #[arg(long, default_value_t = 5)]
    reference_seconds: u64,
    /// `fan-out` only: the items each instance's start message carries, one task per item
    /// (default 10). Refused for the other workloads, which have no items. The engine fails an
    /// instance over more than `sutra.for-each.max-items` (default 10,000; in process, raise it
    /// with SUTRA_FOR_EACH_MAX_ITEMS).
    #[arg(long, value_name = "N")]
    items: Option<u64>,
    /// With --db only: before the clock starts, write ENDED completed instances and LIVE
    /// suspended ones (`two-tasks` only: 0 for the other workloads) into the scratch database,
    /// each live one with an available task on topic `bench-preloaded` (which the bench's worker
    /// does not poll, so they stay suspended), in bulk, then VACUUM ANALYZE — the run then
    /// measures the engine at that volume, on analyzed tables. Rows of the shape the engine
    /// writes for `two-tasks`, the ended instances' completed tasks, history and inbox rows
    /// among them. E.g. 1000000,100000, or 20000,0 for a database in use (docs/performance.md).
    #[arg(long, value_name = "ENDED,LIVE")]
    preload: Option<preload::Preload>,
}

/// How the run is configured, after the arguments are checked.
struct Plan<'a> {
    workload: Workload,
    /// `fan-out`'s items per instance; 0 for the other workloads.
    items: u64,
    instances: u64,
    clients: usize,
    replicas: usize,
    max: Duration,
    quiet: bool,
    /// `--token`, for a running server with `sutra.auth.tokens`.
    token: Option<&'a str>,
    /// Where an AMQP workload's clients publish, and the engine consumes and publishes.
    broker: Option<Arc<Broker>>,
    args: &'a Args,
}

/// What driving the workload produced.
struct Driven {
    completed: u64,
    elapsed: Duration,
    stopped_early: bool,
    recorder: Recorder,
    /// The machine's CPU over the driving time, where it can be read.
    machine: Option<machine::Load>,
}

pub fn run(args: &Args, server: Option<&str>, token: Option<&str>, json: bool) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sutra bench: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    if let Err(error) = check_arguments(args, server) {
        eprintln!("sutra bench: {error}");
        return ExitCode::from(2);
    }
    let plan = Plan {
        workload: args.workload,
        items: match args.workload {
            Workload::FanOut => args.items.unwrap_or(workload::ITEMS_DEFAULT),
            _ => 0,
        },
        instances: args.instances,
        clients: args.clients,
        replicas: args.replicas.unwrap_or(1),
        max: Duration::from_secs(args.max_seconds),
        quiet: json,
        token,
        broker: None,
        args,
    };
    let plan = match args.workload.uses_amqp() {
        true => match runtime.block_on(Broker::open(&crate::in_process::rabbitmq_url())) {
            Ok(broker) => Plan {
                broker: Some(Arc::new(broker)),
                ..plan
            },
            Err(error) => {
                eprintln!("sutra bench: {error}");
                return ExitCode::FAILURE;
            }
        },
        false => plan,
    };
    let outcome = runtime.block_on(bench(&plan, server));
    if let Some(broker) = &plan.broker {
        runtime.block_on(broker.close());
    }
    match outcome {
        Ok(report) if json => {
            println!(
                "{}",
                crate::output::pretty(&serde_json::to_value(&report).unwrap_or_default())
            );
            ExitCode::SUCCESS
        }
        Ok(report) => {
            print!("{}", report.text());
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("sutra bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Traffic stays on this machine: the bench is a load generator, not to be aimed elsewhere.
fn check_arguments(args: &Args, server: Option<&str>) -> Result<(), String> {
    if args.instances == 0 || args.clients == 0 || args.lanes == 0 || args.replicas == Some(0) {
        return Err("--instances, --clients, --lanes and --replicas must be at least 1".into());
    }
    if args
        .rate
        .is_some_and(|rate| !(rate.is_finite() && rate > 0.0))
    {
        return Err("--rate must be a number of instances per second above 0".into());
    }
    match (args.workload, args.items) {
        (Workload::FanOut, Some(0)) => {
            return Err("--items must be at least 1: a fan-out over no items has no bodies".into());
        }
        (Workload::FanOut, _) | (_, None) => {}
        (workload, Some(_)) => {
            return Err(format!(
                "--items is for fan-out only; {} has no items",
                workload.name()
            ));
        }
    }
    if args.replicas.is_some() && server.is_some() {
        return Err(
            "--replicas starts replicas of its own; a running server (--server) has its own".into(),
        );
    }
    if args.preload.is_some() && (args.db.is_none() || server.is_some()) {
        return Err(
            "--preload writes rows into the bench's scratch PostgreSQL database: it needs --db, \
             and no --server"
                .into(),
        );
    }
    let live = args.preload.map_or(0, |preload| preload.live);
    if live > 0 && args.workload != Workload::TwoTasks {
        return Err(format!(
            "--preload's LIVE instances are two-tasks' ones, parked on its first task; {} takes \
             ended ones only: --preload ENDED,0",
            args.workload.name()
        ));
    }
    if args.replicas.is_some() && args.db.is_none() {
        return Err(
            "--replicas needs --db: the replicas share one PostgreSQL database, made through it"
                .into(),
        );
    }
    for url in server.into_iter().chain(args.db.as_deref()) {
        let host = postgres::host_of(url).unwrap_or_default();
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !loopback {
            return Err(format!(
                "{} is not on loopback; the bench only sends traffic to this machine",
                postgres::redacted(url)
            ));
        }
    }
    Ok(())
}

async fn bench(plan: &Plan<'_>, server: Option<&str>) -> Result<Report, String> {
    let mut admin = match &plan.args.db {
        Some(url) => Some(Admin::connect(url).await?),
        None => None,
    };
    let (driven, activity) = match (server, admin.as_mut()) {
        (Some(url), admin) => against_server(plan, url, admin).await?,
        (None, Some(admin)) => on_postgres(plan, admin).await?,
        (None, None) => (in_process_embedded(plan).await?, None),
    };
    let reference = match admin.as_mut() {
        Some(admin) => {
            let engine = engine_connections(plan)?;
            let seconds = plan.args.reference_seconds;
            Some(reference::measure(admin, plan.clients, engine, seconds).await?)
        }
        None => None,
    };
    Ok(report(plan, server, driven, activity, reference))
}

async fn in_process_embedded(plan: &Plan<'_>) -> Result<Driven, String> {
    let scratch = ScratchDir::create("bench")?;
    let sources = engine_sources(&scratch.sqlite_datasource(), plan);
    serve_while(sources, |url| async move {
        let client = deploy(&url, plan).await?;
        drive(plan, std::slice::from_ref(&client)).await
    })
    .await
}

/// The engine on a scratch database, its commits and writes counted from the deployment to the
/// engine's stop, when its connections close and report their last counts.
async fn on_postgres(
    plan: &Plan<'_>,
    admin: &mut Admin,
) -> Result<(Driven, Option<Activity>), String> {
    let name = format!("sutra_bench_{}", std::process::id());
    let url = admin.create_database(&name).await?;
    let outcome = measure(plan, admin, &name, &url).await;
    let dropped = admin.drop_database(&name).await;
    let outcome = outcome?;
    dropped?;
    Ok(outcome)
}

/// Runs the engine, in process or as replicas, on database `name` at `url`.
async fn measure(
    plan: &Plan<'_>,
    admin: &mut Admin,
    name: &str,
    url: &str,
) -> Result<(Driven, Option<Activity>), String> {
    let (driven, before) = match plan.replicas {
        1 => measure_in_process(plan, admin, name, url).await?,
        count => measure_replicas(plan, admin, name, url, count).await?,
    };
    tokio::time::sleep(CLOSED).await;
    let after = admin.mark(name, url).await?;
    Ok((driven, Some(before.until(after))))
}

/// What driving found, and the counters read just before the clock started.
async fn measure_in_process(
    plan: &Plan<'_>,
    admin: &mut Admin,
    name: &str,
    url: &str,
) -> Result<(Driven, Mark), String> {
    let sources = engine_sources(url, plan);
    serve_while(sources, |server| async move {
        let client = deploy(&server, plan).await?;
        let before = start_clock(plan, admin, name, url).await?;
        Ok((drive(plan, std::slice::from_ref(&client)).await?, before))
    })
    .await
}

/// `count` replicas on the scratch database, stopped when the run ends however it ends: done,
/// failed, or interrupted by a signal to the bench.
async fn measure_replicas(
    plan: &Plan<'_>,
    admin: &mut Admin,
    name: &str,
    url: &str,
    count: usize,
) -> Result<(Driven, Mark), String> {
    let mut interruption = Interruption::listen()?;
    let brokers = brokers(plan);
    let mut replicas = Replicas::start(url, plan.args.lanes, count, &brokers)?;
    let measured = tokio::select! {
        measured = drive_replicas(plan, &mut replicas, admin, name, url) => measured,
        signal = interruption.received() => Err(format!("interrupted by {signal}")),
    };
    let measured = measured.map_err(|error| replicas.explain(error));
    let stopped = replicas.stop().await;
    let measured = measured?;
    stopped?;
    Ok(measured)
}

/// Deploys through the first replica once all are ready, waits until every replica has loaded
/// the deployment, and drives the workload over all of them.
async fn drive_replicas(
    plan: &Plan<'_>,
    replicas: &mut Replicas,
    admin: &mut Admin,
    name: &str,
    url: &str,
) -> Result<(Driven, Mark), String> {
    let urls = replicas.ready().await?;
    let mut clients = vec![deploy(&urls[0], plan).await?];
    for url in &urls[1..] {
        clients.push(connect(url, plan)?);
    }
    for client in &clients {
        converged(plan.workload, client).await?;
    }
    let before = start_clock(plan, admin, name, url).await?;
    Ok((drive(plan, &clients).await?, before))
}

/// Preloads the scratch database when asked, then reads the counters the run is measured from.
async fn start_clock(
    plan: &Plan<'_>,
    admin: &mut Admin,
    name: &str,
    url: &str,
) -> Result<Mark, String> {
    if let Some(preload) = plan.args.preload {
        preload::load(url, preload).await?;
        tokio::time::sleep(CLOSED).await;
    }
    admin.mark(name, url).await
}

/// Waits until the server behind `client` has loaded the workload's deployment.
async fn converged(workload: Workload, client: &Client) -> Result<(), String> {
    let deadline = Instant::now() + CONVERGENCE;
    while !workload.is_routed(client).await? {
        if Instant::now() >= deadline {
            return Err(format!(
                "{} did not load the {} deployment within {CONVERGENCE:?}",
                client.base_url(),
                workload.name()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Waits until each of `servers` consumes the AMQP workload's request queue.
async fn consumed(broker: &Broker, servers: usize) -> Result<(), String> {
    let deadline = Instant::now() + CONVERGENCE;
    while (broker.consumers().await? as usize) < servers {
        if Instant::now() >= deadline {
            return Err(format!(
                "the engine did not consume the request queue within {CONVERGENCE:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

async fn against_server(
    plan: &Plan<'_>,
    url: &str,
    admin: Option<&mut Admin>,
) -> Result<(Driven, Option<Activity>), String> {
    let client = deploy(url, plan).await?;
    let db = plan.args.db.as_deref();
    let name = db.and_then(postgres::database_of);
    let Some(((admin, name), db)) = admin.zip(name).zip(db) else {
        return Ok((drive(plan, std::slice::from_ref(&client)).await?, None));
    };
    let before = admin.mark(name, db).await?;
    let driven = drive(plan, std::slice::from_ref(&client)).await?;
    tokio::time::sleep(SETTLE).await;
    let after = admin.mark(name, db).await?;
    Ok((driven, Some(before.until(after))))
}

/// Defaults, then `SUTRA_*` variables (so `SUTRA_STORE_POOL_SIZE` and the like can be tried),
/// then what the bench decides.
fn engine_sources(datasource: &str, plan: &Plan<'_>) -> Sources {
    brokers(plan).iter().fold(
        Sources::defaults()
            .environment(std::env::vars())
            .flag("sutra.datasource", Some(datasource))
            .flag("sutra.listen", Some("127.0.0.1:0"))
            .flag("sutra.engine.lanes", Some(&plan.args.lanes.to_string())),
        |sources, (key, url)| sources.flag(key, Some(url)),
    )
}

/// The most connections one engine of the bench's configuration opens: its pool, a second one
/// as large when `sutra.store.system-url` names another role, and its two LISTEN connections
/// (deployments, ended instances). A client of the bench is an HTTP connection, never one of
/// these: the engine's connections do not grow with `--clients`.
fn engine_connections(plan: &Plan<'_>) -> Result<usize, String> {
    let datasource = plan.args.db.as_deref().unwrap_or_default();
    let settings = engine_sources(datasource, plan)
        .settings()
        .map_err(|e| e.to_string())?;
    let pools = 1 + usize::from(settings.store_system_url.is_some());
    Ok(settings.store_pool_size as usize * pools + 2)
}

/// The broker settings the engine needs for the workload: RabbitMQ's URL for an AMQP one.
fn brokers(plan: &Plan<'_>) -> Vec<(&'static str, String)> {
    match plan.broker {
        Some(_) => vec![(
            "sutra.transports.amqp.url",
            crate::in_process::rabbitmq_url(),
        )],
        None => Vec::new(),
    }
}

async fn deploy(url: &str, plan: &Plan<'_>) -> Result<Client, String> {
    let workload = plan.workload;
    let client = connect(url, plan)?;
    client
        .deploy(&workload.document())
        .await
        .map_err(|e| format!("deploying the {} workload failed: {e}", workload.name()))?;
    Ok(client)
}

fn connect(url: &str, plan: &Plan<'_>) -> Result<Client, String> {
    let client = Client::new(url).map_err(|e| e.to_string())?;
    Ok(match plan.token {
        Some(token) => client.with_token(token),
        None => client,
    })
}

fn report(
    plan: &Plan<'_>,
    server: Option<&str>,
    driven: Driven,
    activity: Option<Activity>,
    reference: Option<reference::Reference>,
) -> Report {
    let commits = activity.map(|activity| activity.commits);
    let seconds = driven.elapsed.as_secs_f64().max(f64::EPSILON);
    // Instance counts are far below 2^52: exact as floats.
    let completed = driven.completed as f64;
    let instances_per_second = completed / seconds;
    let items = (plan.workload == Workload::FanOut).then(|| {
        let done = driven.completed * plan.items;
        let ratio = reference
            .as_ref()
            .map(|reference| done as f64 / seconds / reference.commits_per_second);
        Items::new(
            plan.items,
            done,
            seconds,
            commits,
            driven.machine.as_ref(),
            ratio,
        )
    });
    let percentiles = driven.recorder.percentiles();
    Report {
        workload: plan.workload.name(),
        engine: match (server, &plan.args.db, plan.replicas) {
            (Some(url), _, _) => url.to_owned(),
            (None, Some(_), 1) => "in-process (PostgreSQL)".to_owned(),
            (None, Some(_), _) => "sutra serve replicas (PostgreSQL)".to_owned(),
            (None, None, _) => "in-process (embedded store)".to_owned(),
        },
        lanes: server.is_none().then_some(plan.args.lanes),
        replicas: server.is_none().then_some(plan.replicas),
        clients: plan.clients,
        rate: plan.args.rate,
        instances_requested: plan.instances,
        instances_completed: driven.completed,
        stopped_early: driven.stopped_early,
        seconds,
        instances_per_second,
        steps_per_second: instances_per_second * plan.workload.steps(plan.items) as f64,
        items,
        latency: Latency {
            measured: report::LATENCY_MEASURED,
            samples: driven.recorder.samples(),
            p50_ms: percentiles.map(|(p50, _)| report::millis(p50)),
            p99_ms: percentiles.map(|(_, p99)| report::millis(p99)),
        },
        commits: commits.map(|total| Commits {
            counted: report::COMMITS_COUNTED,
            total,
            per_second: total as f64 / seconds,
            per_completed_instance: (driven.completed > 0).then(|| total as f64 / completed),
        }),
        writes: activity.map(|activity| report::Writes::new(&activity, driven.completed)),
        ratio: reference
            .as_ref()
            .map(|reference| instances_per_second / reference.commits_per_second),
        reference,
        machine: driven.machine,
    }
}
