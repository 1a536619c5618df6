//! Driving a run: the drivers that start instances (a closed loop of clients, or an open loop
//! at a rate), the workload's worker per server, and the progress shown while they run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use sutra_client::Client;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use super::amqp::Broker;
use super::latency::Recorder;
use super::workload::Workload;
use super::{Driven, Plan, consumed, machine};

/// Runs `plan.instances` instances, by `plan.clients` concurrent drivers or at `--rate` (and the
/// workload's worker per server), until all are done or `plan.max` has passed. Each server's
/// worker runs as many handlers at once as that server has drivers, so the worker's concurrency
/// is `plan.clients` in all.
pub(super) async fn drive(plan: &Plan<'_>, servers: &[Client]) -> Result<Driven, String> {
    if let Some(broker) = &plan.broker {
        consumed(broker, servers.len()).await?;
    }
    let recorder = Recorder::default();
    let progress = progress_bar(plan);
    let (stop_workers, workers_stopped) = watch::channel(());
    let workers: Vec<_> = servers
        .iter()
        .enumerate()
        .filter_map(|(index, client)| {
            let share = drivers_of(index, servers.len(), plan.clients).max(1);
            let concurrency = u32::try_from(share).unwrap_or(u32::MAX);
            let worker = plan
                .workload
                .worker(client.clone(), recorder.clone(), concurrency)?;
            let mut stopped = workers_stopped.clone();
            Some(tokio::spawn(worker.run(async move {
                let _ = stopped.changed().await;
            })))
        })
        .collect();
    let run = format!(
        "{}-{}",
        std::process::id(),
        std::time::UNIX_EPOCH
            .elapsed()
            .unwrap_or_default()
            .as_millis()
    );
    let started = Instant::now();
    let cpu_at_start = machine::Sample::now();
    let driving = Driving {
        servers: servers.to_vec(),
        broker: plan.broker.clone(),
        recorder: recorder.clone(),
        progress: progress.clone(),
        run,
        workload: plan.workload,
        items: plan.items,
    };
    let deadline = started + plan.max;
    let drivers = match plan.args.rate {
        None => closed_loop(&driving, plan.clients, plan.instances, deadline),
        Some(rate) => vec![tokio::spawn(open_loop(
            driving,
            rate,
            plan.instances,
            started,
            deadline,
        ))],
    };
    let mut failure = None;
    for driver in drivers {
        let outcome = driver.await.map_err(|e| e.to_string()).and_then(|r| r);
        failure = failure.or(outcome.err());
    }
    let elapsed = started.elapsed();
    let cpu_at_end = machine::Sample::now();
    progress.finish_and_clear();
    drop(stop_workers);
    for worker in workers {
        let _ = worker.await;
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    let completed = progress.position();
    let machine = cpu_at_start
        .zip(cpu_at_end)
        .and_then(|(start, end)| start.load_until(end, elapsed, completed));
    Ok(Driven {
        completed,
        elapsed,
        stopped_early: completed < plan.instances,
        recorder,
        machine,
    })
}

/// What every driver of a run shares: where instance `n` is driven, and what records it.
#[derive(Clone)]
struct Driving {
    servers: Vec<Client>,
    broker: Option<Arc<Broker>>,
    recorder: Recorder,
    progress: ProgressBar,
    /// Keys unique to this run: a server keeps earlier runs' instances and event ids.
    run: String,
    workload: Workload,
    /// The items of a `fan-out` start message.
    items: u64,
}

impl Driving {
    /// Drives instance `n` to its end, through server `n`'s turn of the round robin.
    async fn instance(&self, n: u64, server: usize) -> Result<(), String> {
        let client = &self.servers[server % self.servers.len()];
        let key = format!("{}-{n}", self.run);
        self.workload
            .drive(
                client,
                self.broker.as_deref(),
                &key,
                self.items,
                &self.recorder,
            )
            .await?;
        self.progress.inc(1);
        Ok(())
    }
}

/// `clients` drivers, each starting the next instance when its last one ended, until
/// `instances` have started or `deadline` has passed. Driver i talks to server i mod N.
fn closed_loop(
    driving: &Driving,
    clients: usize,
    instances: u64,
    deadline: Instant,
) -> Vec<JoinHandle<Result<(), String>>> {
    let next = Arc::new(AtomicU64::new(0));
    (0..clients)
        .map(|driver| {
            let (driving, next) = (driving.clone(), Arc::clone(&next));
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= instances || Instant::now() >= deadline {
                        return Ok(());
                    }
                    driving.instance(n, driver).await?;
                }
            })
        })
        .collect()
}

/// Starts instance n at `started + n / rate`, whatever is still running, until `instances`
/// have started or `deadline` has passed; instance n talks to server n mod N. Ends when every
/// started instance has, with the first failure if any.
async fn open_loop(
    driving: Driving,
    rate: f64,
    instances: u64,
    started: Instant,
    deadline: Instant,
) -> Result<(), String> {
    let mut running = JoinSet::new();
    for n in 0..instances {
        // Instance counts are far below 2^52: exact as floats.
        let due = started + Duration::from_secs_f64(n as f64 / rate);
        if due >= deadline {
            break;
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
        let driving = driving.clone();
        let server = usize::try_from(n).unwrap_or(usize::MAX);
        running.spawn(async move { driving.instance(n, server).await });
    }
    let mut failure = None;
    while let Some(ended) = running.join_next().await {
        let outcome = ended.map_err(|e| e.to_string()).and_then(|r| r);
        failure = failure.or(outcome.err());
    }
    failure.map_or(Ok(()), Err)
}

/// How many of `clients` round-robin drivers talk to server `index` of `servers`.
fn drivers_of(index: usize, servers: usize, clients: usize) -> usize {
    clients / servers + usize::from(index < clients % servers)
}

fn progress_bar(plan: &Plan<'_>) -> ProgressBar {
    if plan.quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(plan.instances);
    let style = ProgressStyle::with_template(
        "{msg} [{bar:40}] {pos}/{len} instances, {per_sec}, {elapsed_precise}",
    )
    .map(|style| style.progress_chars("=> "));
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar.set_message(format!("sutra bench {}", plan.workload.name()));
    bar
}

#[cfg(test)]
mod tests {
    use super::drivers_of;

    #[test]
    fn round_robin_shares_add_up_to_the_clients() {
        assert_eq!(
            (0..3).map(|i| drivers_of(i, 3, 16)).collect::<Vec<_>>(),
            [6, 5, 5]
        );
        for (servers, clients) in [(1, 16), (3, 16), (3, 2), (4, 4)] {
            let total: usize = (0..servers).map(|i| drivers_of(i, servers, clients)).sum();
            assert_eq!(total, clients, "{servers} servers, {clients} clients");
        }
    }
}
