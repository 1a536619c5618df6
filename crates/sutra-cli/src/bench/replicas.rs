//! `--replicas N`: the engine as N `sutra serve` processes of this same binary over the bench's
//! scratch PostgreSQL database, each on a loopback port of its own, as a fleet is deployed.
//!
//! The processes are the bench's own and none outlives it: each is started with `kill_on_drop`
//! in a process group of its own (so a Ctrl-C at the terminal reaches the bench alone, which
//! then stops them in order), and [`Replicas::stop`] ends each by its PID — SIGTERM, the
//! graceful path that resigns its leases and drains, then SIGKILL after [`STOP_BOUND`]. Their
//! stderr goes to a log file per replica in a scratch directory, removed after the run unless a
//! replica died early: then the error names that log, and it stays to be read.

use std::fs::File;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sutra_client::Client;
use sutra_server::config::env_name;
use tokio::process::{Child, Command};
use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::in_process::ScratchDir;

/// How long a replica may take to listen and answer `/readyz`: far above a healthy start
/// (migrations included), short enough that a wedged one does not hang the bench.
const STARTUP: Duration = Duration::from_secs(60);
/// How long a replica may take to drain after SIGTERM before it is killed.
const STOP_BOUND: Duration = Duration::from_secs(10);
/// How often a starting replica is looked at again.
const PAUSE: Duration = Duration::from_millis(20);
/// What `sutra serve` prints once it listens, followed by its URL.
const LISTENING: &str = "sutra: listening on ";

/// Leases short enough that the singleton roles (`timers`, the sweep, the purger) settle on one
/// replica within a second of the start, and pass on within seconds when their holder stops,
/// rather than after the production TTL of 30 s. The poll must stay under half the TTL.
const LEASE_TTL: &str = "PT2S";
const LEASE_POLL: &str = "PT0.5S";

/// The fleet: every replica the bench started, running or not.
pub struct Replicas {
    members: Vec<Replica>,
    /// The replicas' logs, and their working directory (so no `sutra.yaml` of the bench's
    /// directory is read: the replicas are configured as the in-process engine is).
    logs: ScratchDir,
    /// A replica died early: its log is named in an error and must outlive the run.
    keep_logs: bool,
}

struct Replica {
    index: usize,
    child: Child,
    pid: u32,
    log: PathBuf,
    /// How it ended, once it is seen to have exited (and been reaped: its PID is no longer
    /// its to be signalled).
    exited: Option<ExitStatus>,
}

impl Replica {
    /// What became of it, naming its log, if it has exited.
    fn death(&self) -> Option<String> {
        let status = self.exited?;
        Some(format!(
            "replica {} (pid {}) exited early ({status}); its log: {}",
            self.index,
            self.pid,
            self.log.display()
        ))
    }
}

impl Replicas {
    /// Starts `count` replicas serving `datasource` with `lanes` lanes each. Returns once they
    /// are started, not ready: [`Replicas::ready`] waits for that. When one cannot be started,
    /// those before it are left to `kill_on_drop`: they have not served anything yet.
    /// `settings` are more configuration keys, such as a broker's URL, each set in the
    /// environment as `SUTRA_*`.
    pub fn start(
        datasource: &str,
        lanes: usize,
        count: usize,
        settings: &[(&str, String)],
    ) -> Result<Replicas, String> {
        let mut replicas = Replicas {
            members: Vec::with_capacity(count),
            logs: ScratchDir::create("bench-replicas")?,
            keep_logs: false,
        };
        let binary = std::env::current_exe()
            .map_err(|e| format!("cannot find this sutra binary to start replicas of: {e}"))?;
        for index in 0..count {
            let log = replicas.logs.path().join(format!("replica-{index}.log"));
            let stderr =
                File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
            let child = Command::new(&binary)
                .args([
                    "serve",
                    "--listen",
                    "127.0.0.1:0",
                    "--lanes",
                    &lanes.to_string(),
                ])
                .args(["--replica-id", &replica_id(index)])
                // In the environment rather than on the command line, where `ps` would show
                // the password the URL may carry.
                .env("SUTRA_DATASOURCE", datasource)
                .env("SUTRA_LEASE_TTL", LEASE_TTL)
                .env("SUTRA_LEASE_POLL", LEASE_POLL)
                .envs(settings.iter().map(|(key, value)| (env_name(key), value)))
                .current_dir(replicas.logs.path())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(stderr)
                .process_group(0)
                .kill_on_drop(true)
                .spawn()
                .map_err(|e| format!("cannot start replica {index} ({}): {e}", binary.display()))?;
            let pid = child
                .id()
                .ok_or_else(|| format!("replica {index} exited as it started"))?;
            replicas.members.push(Replica {
                index,
                child,
                pid,
                log,
                exited: None,
            });
        }
        Ok(replicas)
    }

    /// Waits until every replica listens and answers `/readyz`; returns their base URLs, in
    /// replica order.
    pub async fn ready(&mut self) -> Result<Vec<String>, String> {
        let deadline = Instant::now() + STARTUP;
        let mut urls = Vec::with_capacity(self.members.len());
        for index in 0..self.members.len() {
            let url = loop {
                if let Some(url) = self.listening(index)? {
                    break url;
                }
                self.wait_a_moment(index, deadline, "listen").await?;
            };
            let client = Client::new(&url).map_err(|e| e.to_string())?;
            while client.ready().await.is_err() {
                self.wait_a_moment(index, deadline, "answer /readyz")
                    .await?;
            }
            urls.push(url);
        }
        Ok(urls)
    }

    /// `error`, followed by what became of every replica that has exited: a run that failed
    /// because one died says so, and names its log.
    pub fn explain(&mut self, error: String) -> String {
        let deaths = self.deaths();
        if deaths.is_empty() {
            error
        } else {
            format!("{error}\n{deaths}")
        }
    }

    /// Stops every replica: SIGTERM to all, then SIGKILL to any still running after
    /// [`STOP_BOUND`]. A replica that had exited before it was asked to is an error naming its
    /// log, which is then kept.
    pub async fn stop(mut self) -> Result<(), String> {
        let deaths = self.deaths();
        for member in self.members.iter().filter(|m| m.exited.is_none()) {
            terminate(member.pid).await;
        }
        for member in &mut self.members {
            if tokio::time::timeout(STOP_BOUND, member.child.wait())
                .await
                .is_err()
            {
                eprintln!(
                    "sutra bench: replica {} (pid {}) did not stop within {STOP_BOUND:?} of \
                     SIGTERM; killed",
                    member.index, member.pid
                );
                let _ = member.child.kill().await;
            }
        }
        if self.keep_logs {
            let _ = self.logs.keep();
        }
        if deaths.is_empty() {
            Ok(())
        } else {
            Err(deaths)
        }
    }

    /// The URL replica `index` printed once it listened, if it has yet.
    fn listening(&self, index: usize) -> Result<Option<String>, String> {
        let log = &self.members[index].log;
        let text = std::fs::read_to_string(log)
            .map_err(|e| format!("cannot read {}: {e}", log.display()))?;
        Ok(text
            .lines()
            .find_map(|line| line.split_once(LISTENING))
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .map(str::to_owned))
    }

    /// A pause while replica `index` starts; an error once it has exited or `deadline` passed.
    async fn wait_a_moment(
        &mut self,
        index: usize,
        deadline: Instant,
        what: &str,
    ) -> Result<(), String> {
        let deaths = self.deaths();
        if !deaths.is_empty() {
            return Err(deaths);
        }
        if Instant::now() >= deadline {
            let member = &self.members[index];
            self.keep_logs = true;
            return Err(format!(
                "replica {index} (pid {}) did not {what} within {STARTUP:?}; its log: {}",
                member.pid,
                member.log.display()
            ));
        }
        tokio::time::sleep(PAUSE).await;
        Ok(())
    }

    /// One line per replica that has exited, naming its log; empty while all run.
    fn deaths(&mut self) -> String {
        for member in self.members.iter_mut().filter(|m| m.exited.is_none()) {
            member.exited = member.child.try_wait().ok().flatten();
        }
        let deaths: Vec<String> = self.members.iter().filter_map(Replica::death).collect();
        self.keep_logs |= !deaths.is_empty();
        deaths.join("\n")
    }
}

/// `sutra-bench-{pid}-r{index}`: the bench's process id makes its replicas' ids unique on this
/// machine and lets anyone (the tests among them) tell which processes are this run's.
fn replica_id(index: usize) -> String {
    format!("sutra-bench-{}-r{index}", std::process::id())
}

/// SIGTERM to `pid`, with the `kill` command: this workspace forbids the `unsafe` a direct
/// `kill(2)` would take. Only ever a replica not yet reaped, so the PID is still its own.
async fn terminate(pid: u32) {
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await;
}

/// SIGINT (Ctrl-C) and SIGTERM to the bench, listened for from before the first replica starts
/// until they are stopped: either ends the run, and the bench stops its replicas and drops its
/// database instead of dying with them left running.
pub struct Interruption {
    interrupt: Signal,
    terminate: Signal,
}

impl Interruption {
    pub fn listen() -> Result<Interruption, String> {
        let listen = |kind| {
            signal(kind).map_err(|e| format!("cannot listen for signals to stop replicas: {e}"))
        };
        Ok(Interruption {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
        })
    }

    /// Completes when either signal arrives, naming it.
    pub async fn received(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
        }
    }
}
