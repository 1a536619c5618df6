//! Sutra's runtime: it turns the pure executor into a durable engine over a [`Store`].
//!
//! Architecture invariant: this crate knows the store only as the `sutra_store::Store` trait and
//! knows no transport; HTTP and brokers live in the server. Its pieces:
//!
//! - [`lane`]: execution lanes, each a loop on a dedicated thread (SPEC §6).
//! - [`runner`]: the claim-guarded step (SPEC §5.2).
//! - [`intake`]: a message on a channel → dedup, relay, start or buffer (SPEC §5.1).
//! - [`background`]: the delivery dispatcher (timers and every other asked row, with look-again
//!   and `recover`, SPEC §5.6) and the stuck-instance sweep.
//! - [`settle`]: the deferred-acknowledgement registry (SPEC §5.3).
//! - [`outbox`]: the outbox worker, and the [`outbox::Sender`] seam the server's transports
//!   implement (SPEC §5.4).
//! - [`tasks`]: the pull surface: long-polls, completions, failures and extensions of external
//!   tasks (SPEC §5.5).

pub mod background;
pub mod fault;
pub mod intake;
mod lane;
pub mod outbox;
pub mod registry;
pub mod runner;
pub mod settle;
pub mod tasks;

use std::sync::{Arc, Mutex, RwLock};

use jiff::SignedDuration;
use sutra_core::check;
use sutra_core::diagnostic::Diagnostic;
use sutra_core::step::Event;
use sutra_store::{DeploymentRecord, InstanceKey, Owner, Store};
use tokio::sync::{Notify, watch};
use tracing::warn;

use crate::lane::Lane;
use crate::outbox::Sender;
use crate::registry::Live;
use crate::runner::{StepOutcome, StepRequest};
use crate::settle::SettleRegistry;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Stable for the life of the process; owner ids are derived from it.
    pub replica_id: String,
    pub lanes: usize,
    pub lane_queue_depth: usize,
    pub claim_timeout: SignedDuration,
    pub sweep_interval: SignedDuration,
    pub max_recoveries: u32,
    pub deliveries_batch: u32,
    /// The longest the dispatcher sleeps between looks at due deliveries, whatever it was told:
    /// the backstop for deliveries written by another replica.
    pub deliveries_poll: SignedDuration,
    /// Outbox rows claimed per pass (`sutra.outbox.batch`). A claimed row's claim goes stale
    /// after `claim_timeout`, when another sender takes it over.
    pub outbox_batch: u32,
    /// The delay before a failed send's first retry (`sutra.outbox.backoff`); it doubles per
    /// failure, up to [`outbox::BACKOFF_CAP`].
    pub outbox_backoff: SignedDuration,
    /// The longest the outbox worker sleeps between passes when no commit wakes it: the backstop
    /// for rows written by another replica.
    pub outbox_poll: SignedDuration,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            replica_id: "sutra".into(),
            lanes: 1,
            lane_queue_depth: 1024,
            claim_timeout: SignedDuration::from_mins(5),
            sweep_interval: SignedDuration::from_mins(1),
            max_recoveries: 5,
            deliveries_batch: 100,
            deliveries_poll: SignedDuration::from_secs(1),
            outbox_batch: 100,
            outbox_backoff: SignedDuration::from_secs(1),
            outbox_poll: SignedDuration::from_secs(1),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The instance's claim is held by another owner. Retry-safe: nothing was written.
    #[error("the instance is busy: another step holds its claim; retry shortly")]
    Busy,
    #[error("no instance {0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidState(String),
    /// The event answers a park the instance no longer holds; nothing was applied.
    #[error("{0}")]
    Stale(String),
    #[error("the deployment version {0} is not loaded on this replica")]
    Unpinned(String),
    #[error(transparent)]
    Store(#[from] sutra_store::Error),
    #[error("the step failed unexpectedly (a bug); its claim was released")]
    Panicked,
    #[error("the engine is shutting down")]
    Closed,
    #[error("no task {0}")]
    TaskNotFound(String),
    /// The worker's lock token does not hold the task; nothing was written.
    #[error("{0}")]
    LockLost(String),
}

/// What the background loops, the lanes and the callers share.
pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub config: EngineConfig,
    pub settle: SettleRegistry,
    /// Wakes the delivery dispatcher: something became due now.
    pub deliveries_due: Notify,
    /// Wakes the outbox worker: a commit wrote outbox rows.
    pub outbox_due: Notify,
    /// Wakes every long-poll: a task may have become available (a commit armed one, a failed
    /// attempt was rescheduled).
    pub tasks_available: Notify,
}

impl Shared {
    /// `{replica_id}/lane-{i}`: lane-scoped, so that *same owner ⇒ same lane ⇒ serialized*.
    pub fn lane_owner(&self, lane: usize) -> Owner {
        Owner(format!("{}/lane-{lane}", self.config.replica_id))
    }

    /// `{replica_id}/admin`: no lane can produce it, so an administrative claim never re-enters
    /// past a step in flight on this replica. Administrative steps run one at a time
    /// (`Engine::administering`), so *same owner ⇒ serialized* holds for it as for a lane.
    pub fn admin_owner(&self) -> Owner {
        Owner(format!("{}/admin", self.config.replica_id))
    }
}

pub struct Engine {
    shared: Arc<Shared>,
    /// The intake-side view; lanes hold their own, flipped in their queues.
    live: RwLock<Arc<Live>>,
    lanes: Vec<Lane>,
    /// Serializes deployments on this replica so that two activations never interleave.
    deploying: tokio::sync::Mutex<()>,
    /// One administrative step at a time on this replica. They all claim as the one admin owner,
    /// and the claim re-enters for the same owner: two at once would both hold the instance
    /// (docs/protocol.md, the `SharedAdminOwner` counterexample). Each is one short step, so
    /// waiting here is like waiting in a lane's queue.
    administering: tokio::sync::Mutex<()>,
    shutdown: watch::Sender<bool>,
    /// Set when waiting long-polls should answer now (see [`Engine::end_polls`]).
    polls_end: watch::Sender<bool>,
    background: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// The server's transports, through which the outbox worker sends.
    sender: Arc<dyn Sender>,
}

/// What a deployment produced.
#[derive(Debug)]
pub struct Deployed {
    pub record: DeploymentRecord,
    /// Warnings of the checker (the deployment was accepted).
    pub warnings: Vec<Diagnostic>,
}

#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    #[error("the deployment is invalid")]
    Invalid(Vec<Diagnostic>),
    #[error(transparent)]
    Engine(#[from] Error),
}

impl Engine {
    /// Loads every deployment, starts the lanes and the background loops. The delivery
    /// dispatcher's first pass is `recover`: every due row that was asked and not taken. The
    /// outbox worker sends through `sender`.
    pub async fn start(
        store: Arc<dyn Store>,
        config: EngineConfig,
        sender: Arc<dyn Sender>,
    ) -> Result<Arc<Engine>, Error> {
        let live = Arc::new(load_live(store.as_ref()).await?);
        let shared = Arc::new(Shared {
            store,
            config: config.clone(),
            settle: SettleRegistry::default(),
            deliveries_due: Notify::new(),
            outbox_due: Notify::new(),
            tasks_available: Notify::new(),
        });
        let lanes = (0..config.lanes.max(1))
            .map(|i| {
                Lane::spawn(
                    i,
                    Arc::clone(&shared),
                    Arc::clone(&live),
                    config.lane_queue_depth,
                )
            })
            .collect();
        let (shutdown, _) = watch::channel(false);
        let engine = Arc::new(Engine {
            shared,
            live: RwLock::new(live),
            lanes,
            deploying: tokio::sync::Mutex::new(()),
            administering: tokio::sync::Mutex::new(()),
            shutdown,
            polls_end: watch::Sender::new(false),
            background: Mutex::new(Vec::new()),
            sender,
        });
        let mut loops = background::spawn(&engine);
        loops.push(outbox::spawn(&engine));
        *engine.background.lock().unwrap_or_else(|p| p.into_inner()) = loops;
        Ok(engine)
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub(crate) fn sender(&self) -> &dyn Sender {
        self.sender.as_ref()
    }

    pub fn live(&self) -> Arc<Live> {
        Arc::clone(&self.live.read().unwrap_or_else(|p| p.into_inner()))
    }

    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// The lane that owns `instance` (affinity by a stable hash of its id).
    pub(crate) fn lane_for(&self, instance: &str) -> &Lane {
        let hash = xxhash_rust::xxh3::xxh3_64(instance.as_bytes());
        &self.lanes[(hash % self.lanes.len() as u64) as usize]
    }

    pub(crate) async fn run_on_lane(&self, request: StepRequest) -> Result<StepOutcome, Error> {
        self.lane_for(&request.key.id).run(request).await
    }

    /// Lanes that have been on one request for longer than the claim timeout: their step has
    /// certainly lost its claim, so something below the engine is stuck (SPEC §4 readiness).
    pub fn wedged_lanes(&self) -> Vec<usize> {
        let limit = self.shared.config.claim_timeout.unsigned_abs();
        let stuck =
            |(i, lane): (usize, &Lane)| lane.busy_for().filter(|busy| *busy > limit).map(|_| i);
        self.lanes.iter().enumerate().filter_map(stuck).collect()
    }

    pub fn lane_queue_depths(&self) -> Vec<usize> {
        self.lanes.iter().map(Lane::queue_depth).collect()
    }

    /// Checks, stores and activates a deployment: version n+1 becomes active on every lane
    /// before intake routes to it.
    pub async fn deploy(&self, source: &str) -> Result<Deployed, DeployError> {
        let _one_at_a_time = self.deploying.lock().await;
        let checked = check::check(source);
        let (errors, warnings): (Vec<_>, Vec<_>) = checked
            .diagnostics
            .into_iter()
            .partition(Diagnostic::is_error);
        let Some(deployment) = checked.deployment.filter(|_| errors.is_empty()) else {
            return Err(DeployError::Invalid(errors));
        };
        let conflicts = channel_conflicts(&self.live(), &deployment);
        if !conflicts.is_empty() {
            return Err(DeployError::Invalid(conflicts));
        }
        let record = self
            .shared
            .store
            .deploy(&deployment.tenant, &deployment.name, source)
            .await
            .map_err(Error::from)?;
        let live = Arc::new(self.live().with(&record, deployment));
        for lane in &self.lanes {
            lane.activate(Arc::clone(&live)).await?;
        }
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = live;
        Ok(Deployed { record, warnings })
    }

    /// Cancels an instance under the administrative owner (SPEC §7.4's distinct owner).
    pub async fn cancel(&self, tenant: &str, id: &str) -> Result<StepOutcome, Error> {
        self.administer(tenant, id, Event::Cancel { reason: None })
            .await
    }

    /// Restores a failed instance: its parks are re-armed and the failed node runs again.
    pub async fn restore(&self, tenant: &str, id: &str) -> Result<StepOutcome, Error> {
        self.administer(tenant, id, Event::Restore).await
    }

    async fn administer(&self, tenant: &str, id: &str, event: Event) -> Result<StepOutcome, Error> {
        let _one_at_a_time = self.administering.lock().await;
        let key = InstanceKey {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        };
        let owner = self.shared.admin_owner();
        let resumption = runner::Resumption {
            event,
            taken: None,
            consumed: None,
            hold: false,
        };
        runner::resume(&self.shared, &owner, &self.live(), &key, resumption).await
    }

    /// Fails an instance whose steps keep dying (SPEC §5.2, `SUTRA.RUNTIME.STEP.POISONED`).
    pub(crate) async fn poison(&self, key: &InstanceKey) -> Result<(), Error> {
        let _one_at_a_time = self.administering.lock().await;
        let owner = self.shared.admin_owner();
        let claimed = self
            .shared
            .store
            .claim(
                &key.tenant,
                &key.id,
                &owner,
                self.shared.config.claim_timeout,
            )
            .await;
        let claimed = match claimed {
            Ok(claimed) => claimed,
            Err(sutra_store::Error::ClaimHeld) => return Err(Error::Busy),
            Err(other) => return Err(other.into()),
        };
        let ctx = sutra_core::step::StepContext::at(jiff::Timestamp::now());
        let detail = format!(
            "the instance's step died with its replica {} times in a row",
            self.shared.config.max_recoveries
        );
        let token = claimed.token.clone();
        match sutra_core::exec::fail(
            &claimed.snapshot,
            sutra_core::codes::STEP_POISONED.code,
            &detail,
            ctx,
        ) {
            Ok(step) => {
                self.shared
                    .store
                    .commit(&poisoned_commit(claimed, step))
                    .await?;
            }
            // It ended or failed meanwhile: nothing to poison.
            Err(_) => {
                self.shared
                    .store
                    .release(&key.tenant, &key.id, &token)
                    .await?
            }
        }
        Ok(())
    }

    /// Stops the background loops and the lanes, letting each finish the request in hand.
    pub async fn shutdown(&self) {
        let _ = self.shutdown.send(true);
        self.end_polls();
        let loops = std::mem::take(&mut *self.background.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in loops {
            let _ = handle.await;
        }
        for lane in &self.lanes {
            lane.stop().await;
        }
    }

    pub fn held_callers(&self) -> usize {
        self.shared.settle.held()
    }
}

fn poisoned_commit(
    claimed: sutra_store::Claimed,
    step: sutra_core::step::Step,
) -> sutra_store::StepCommit {
    let disarms = step
        .effects
        .iter()
        .filter_map(|effect| match effect {
            sutra_core::step::Effect::Disarm { park } => Some(*park),
            _ => None,
        })
        .collect();
    sutra_store::StepCommit {
        claim: Some(claimed.token),
        snapshot: step.snapshot,
        history: step.history,
        arms: Vec::new(),
        disarms,
        outbox: Vec::new(),
        taken: None,
        inbox: None,
    }
}

/// A channel name belongs to one deployment per tenant: intake routes by channel alone.
fn channel_conflicts(live: &Live, deployment: &sutra_core::model::Deployment) -> Vec<Diagnostic> {
    deployment
        .channels
        .keys()
        .filter_map(|channel| {
            let owner = live.channel_owner(&deployment.tenant, channel, &deployment.name)?;
            Some(Diagnostic::error(
                "channel-taken",
                sutra_core::diagnostic::Span::default(),
                format!("channel `{channel}` is already declared by deployment `{owner}`"),
            )
            .with_hint("channel names are unique per tenant: rename the channel, or deploy it as part of that deployment"))
        })
        .collect()
}

/// Loads every non-retired deployment version. A version that no longer checks (written by a
/// newer build, or edited by hand) is skipped loudly rather than stopping the replica.
async fn load_live(store: &dyn Store) -> Result<Live, Error> {
    let mut live = Live::default();
    for record in store.deployments(None).await? {
        if record.status == sutra_store::DeploymentStatus::Retired {
            continue;
        }
        match check::check(&record.source).deployment {
            Some(deployment) => live.insert(&record, deployment),
            None => {
                warn!(deployment = %record.name, version = record.version, "stored deployment no longer checks; skipped")
            }
        }
    }
    Ok(live)
}
