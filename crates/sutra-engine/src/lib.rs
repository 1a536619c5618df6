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
//! - [`leadership`]: who runs each singleton role (SPEC §6): every process on the embedded
//!   store, one replica at a time by lease on a shared one. The dispatcher (`timers`), the sweep
//!   (`instance-sweeper`) and [`history`]'s purger (`history-purger`) run only while leading.
//! - [`converge`]: deployments made through another replica, loaded and activated here.
//! - [`settle`]: the deferred-acknowledgement registry (SPEC §5.3).
//! - [`outbox`]: the outbox worker, and the [`outbox::Sender`] seam the server's transports
//!   implement (SPEC §5.4).
//! - [`tasks`]: the pull surface: long-polls, completions, failures and extensions of external
//!   tasks (SPEC §5.5).

pub mod background;
mod converge;
pub mod fault;
mod history;
pub mod intake;
mod lane;
pub mod leadership;
pub mod metrics;
pub mod outbox;
pub mod registry;
pub mod runner;
pub mod settle;
pub mod tasks;
mod test_switches;

use std::sync::{Arc, Mutex, RwLock};

use jiff::SignedDuration;
use sutra_core::check;
use sutra_core::diagnostic::Diagnostic;
use sutra_core::model::Deployment;
use sutra_core::step::Event;
use sutra_store::{DeploymentRecord, InstanceKey, Owner, Store};
use tokio::sync::{Notify, watch};
use tracing::warn;

use crate::lane::Lane;
use crate::leadership::{AlwaysLeading, Elected, Leadership};
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
    /// How long a lease lasts unless renewed (`sutra.lease.ttl`), on a store replicas share.
    pub lease_ttl: SignedDuration,
    /// How often each role's lease is acquired or renewed, and the store asked whether another
    /// replica deployed something (`sutra.lease.poll`).
    pub lease_poll: SignedDuration,
    /// How long terminal instances are kept (`sutra.history.retention`).
    pub history_retention: SignedDuration,
    /// How often the purger looks for history past the retention while it leads
    /// (`sutra.history.purge-interval`).
    pub purge_interval: SignedDuration,
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
            lease_ttl: SignedDuration::from_secs(30),
            lease_poll: SignedDuration::from_secs(10),
            history_retention: SignedDuration::from_hours(7 * 24),
            purge_interval: SignedDuration::from_mins(1),
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
        let lane = test_switches::owner_lane(lane);
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
    leadership: Arc<dyn Leadership>,
    /// Set when the role loops must stop for good (see [`Engine::resign`]).
    resigned: watch::Sender<bool>,
    /// The role loops: each runs its role's work while this replica leads the role.
    roles: Mutex<Vec<tokio::task::JoinHandle<()>>>,
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
    /// The document names a tenant other than the one deploying it.
    #[error("the document is for tenant `{named}`, and tenant `{deployer}` is deploying it")]
    OtherTenant { named: String, deployer: String },
    #[error(transparent)]
    Engine(#[from] Error),
}

impl Engine {
    /// Loads every deployment, starts the lanes, the role loops and the background loops. Each
    /// role loop runs while this replica leads its role: every process on the embedded store, one
    /// replica at a time elected by lease on a store replicas share. The delivery dispatcher's
    /// first pass in each term is `recover`: every due row that was asked and not taken. The
    /// outbox worker sends through `sender`.
    pub async fn start(
        store: Arc<dyn Store>,
        config: EngineConfig,
        sender: Arc<dyn Sender>,
    ) -> Result<Arc<Engine>, Error> {
        let loaded = loadable(store.deployments(None).await?);
        let leadership: Arc<dyn Leadership> = if store.shared_by_replicas() {
            Arc::new(Elected::new(
                Arc::clone(&store),
                config.replica_id.clone(),
                config.lease_ttl,
                config.lease_poll,
            ))
        } else {
            Arc::new(AlwaysLeading::default())
        };
        contend_for_singleton_channels(leadership.as_ref(), &loaded);
        let live = Arc::new(Live::default().with(loaded));
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
            leadership,
            resigned: watch::Sender::new(false),
            roles: Mutex::new(Vec::new()),
            polls_end: watch::Sender::new(false),
            background: Mutex::new(Vec::new()),
            sender,
        });
        let mut roles = background::spawn(&engine);
        roles.push(history::spawn(&engine));
        *engine.roles.lock().unwrap_or_else(|p| p.into_inner()) = roles;
        let mut loops = converge::spawn(&engine);
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

    /// Who runs which singleton role, as this replica sees it.
    pub fn leadership(&self) -> &dyn Leadership {
        self.leadership.as_ref()
    }

    /// Runs `work` as role `role`'s loop: while this replica leads it, until it resigns.
    pub(crate) fn spawn_role<W, F>(
        &self,
        role: &'static str,
        work: W,
    ) -> tokio::task::JoinHandle<()>
    where
        W: FnMut() -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let signal = self.leadership.role(role);
        let stop = self.resigned.subscribe();
        tokio::spawn(leadership::while_leading(role, signal, stop, work))
    }

    /// The lane that owns `instance` (affinity by a stable hash of its id). A test-only switch
    /// can send the request elsewhere ([`test_switches`]).
    pub(crate) fn lane_for(&self, instance: &str) -> &Lane {
        let hash = xxhash_rust::xxh3::xxh3_64(instance.as_bytes());
        let owner = (hash % self.lanes.len() as u64) as usize;
        &self.lanes[test_switches::route(owner, self.lanes.len())]
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

    /// Sets the gauges that mirror in-memory state (lane queue depths, which roles this replica
    /// leads). Cheap, so the server calls it on every scrape rather than on a timer.
    pub fn publish_gauges(&self) {
        for (lane, depth) in self.lane_queue_depths().into_iter().enumerate() {
            metrics::lane_queue_depth(lane, depth);
        }
        for (role, term) in self.leadership.roles() {
            metrics::lease_leader(&role, term.is_some_and(|term| term.current()));
        }
    }

    /// Checks, stores and activates a deployment for `tenant`: version n+1 becomes active on every
    /// lane before intake routes to it. A document naming a tenant must name `tenant`.
    pub async fn deploy(&self, tenant: &str, source: &str) -> Result<Deployed, DeployError> {
        let _one_at_a_time = self.deploying.lock().await;
        let checked = check::check(source);
        let (errors, warnings): (Vec<_>, Vec<_>) = checked
            .diagnostics
            .into_iter()
            .partition(Diagnostic::is_error);
        let Some(deployment) = checked.deployment.filter(|_| errors.is_empty()) else {
            return Err(DeployError::Invalid(errors));
        };
        if let Some(named) = deployment
            .tenant
            .as_deref()
            .filter(|named| *named != tenant)
        {
            return Err(DeployError::OtherTenant {
                named: named.to_owned(),
                deployer: tenant.to_owned(),
            });
        }
        let conflicts = channel_conflicts(&self.live(), tenant, &deployment);
        if !conflicts.is_empty() {
            return Err(DeployError::Invalid(conflicts));
        }
        let record = self
            .shared
            .store
            .deploy(tenant, &deployment.name, source)
            .await
            .map_err(Error::from)?;
        self.activate(vec![(record.clone(), deployment)]).await?;
        Ok(Deployed { record, warnings })
    }

    /// Adds stored `versions` to the live set: every lane flips to it before intake routes by it,
    /// so that no step sees half a deployment (SPEC §6), and the singleton channels the versions
    /// declare are contended for from now on. The one activation path, for deployments made here
    /// and those made through other replicas; callers hold `deploying`, so that two activations
    /// never interleave.
    async fn activate(&self, versions: Vec<(DeploymentRecord, Deployment)>) -> Result<(), Error> {
        contend_for_singleton_channels(self.leadership.as_ref(), &versions);
        let live = Arc::new(self.live().with(versions));
        for lane in &self.lanes {
            lane.activate(Arc::clone(&live)).await?;
        }
        *self.live.write().unwrap_or_else(|p| p.into_inner()) = live;
        Ok(())
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
        let resumed = runner::resume(&self.shared, &owner, &self.live(), &key, resumption).await;
        if matches!(resumed, Err(Error::Busy)) {
            metrics::claim_bounce(metrics::BouncePath::Admin);
        }
        resumed
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
            Err(sutra_store::Error::ClaimHeld) => {
                metrics::claim_bounce(metrics::BouncePath::Admin);
                return Err(Error::Busy);
            }
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

    /// Stops the role loops and gives up this replica's leases, so that other replicas take the
    /// roles at their next poll rather than after the TTL (the restart hang of the design text).
    /// Call it as soon as shutting down begins, before draining requests; steps already in the
    /// lanes finish under their claims. [`Engine::shutdown`] calls it too.
    pub async fn resign(&self) {
        self.resigned.send_replace(true);
        let roles = std::mem::take(&mut *self.roles.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in roles {
            let _ = handle.await;
        }
        self.leadership.resign().await;
    }

    /// Resigns, then stops the background loops and the lanes, letting each finish the request
    /// in hand.
    pub async fn shutdown(&self) {
        self.resign().await;
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
fn channel_conflicts(
    live: &Live,
    tenant: &str,
    deployment: &sutra_core::model::Deployment,
) -> Vec<Diagnostic> {
    deployment
        .channels
        .keys()
        .filter_map(|channel| {
            let owner = live.channel_owner(tenant, channel, &deployment.name)?;
            Some(Diagnostic::error(
                "channel-taken",
                sutra_core::diagnostic::Span::default(),
                format!("channel `{channel}` is already declared by deployment `{owner}`"),
            )
            .with_hint("channel names are unique per tenant: rename the channel, or deploy it as part of that deployment"))
        })
        .collect()
}

/// Every non-retired version of `records` with its checked definition. A version that no longer
/// checks (written by a newer build, or edited by hand) is skipped loudly rather than stopping
/// the replica.
fn loadable(records: Vec<DeploymentRecord>) -> Vec<(DeploymentRecord, Deployment)> {
    records
        .into_iter()
        .filter(|record| record.status != sutra_store::DeploymentStatus::Retired)
        .filter_map(|record| match check::check(&record.source).deployment {
            Some(deployment) => Some((record, deployment)),
            None => {
                warn!(deployment = %record.name, version = record.version, "stored deployment no longer checks; skipped");
                None
            }
        })
        .collect()
}

/// Registers the role of every channel of `versions` declared `singleton: true` (SPEC §6: on
/// first need). Nothing consumes a broker yet, so the role is only held and shown.
fn contend_for_singleton_channels(
    leadership: &dyn Leadership,
    versions: &[(DeploymentRecord, Deployment)],
) {
    for (record, deployment) in versions {
        for (name, channel) in &deployment.channels {
            if channel.singleton {
                leadership.role(&crate::leadership::channel_role(&record.tenant, name));
            }
        }
    }
}
