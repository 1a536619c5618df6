//! The facade: [`Engine`] composes the engine's parts — lanes, deployments, the administrative
//! executor, the role loops and the background loops — and hands each call to the part that
//! does it. It holds no protocol of its own.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::step::Reply;
use sutra_store::{Backlog, Clock, InstanceKey, LockedTask, Store, TaskFailure, TaskState};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};

use crate::admin::{Admin, Restored};
use crate::config::EngineConfig;
use crate::deploy::{self, DeployError, Deployed, Deployments};
use crate::error::Error;
use crate::history_log::{self, TaskOutcome};
use crate::intake::{self, Answer, Inbound, IntakeError};
use crate::lane::Lanes;
use crate::leadership::{self, Leadership, RoleLoops};
use crate::outbox::Sender;
use crate::pulse::Pulse;
use crate::registry::{Current, Live};
use crate::request::{Completion, StepOutcome};
use crate::scheduler;
use crate::shared::Shared;
use crate::tasks::{self, PollRequest, Take};
use crate::{
    answers, bulk, converge, deliveries, history, metrics, outbox, retirement, sampler, sweep,
};

pub struct Engine {
    shared: Arc<Shared>,
    lanes: Arc<Lanes>,
    live: Arc<Current>,
    deployments: Arc<Deployments>,
    admin: Arc<Admin>,
    leadership: Arc<dyn Leadership>,
    /// The role loops: each runs its role's work while this replica leads the role.
    roles: RoleLoops,
    shutdown: watch::Sender<bool>,
    /// Set when waiting long-polls should answer now (see [`Engine::end_polls`]).
    polls_end: watch::Sender<bool>,
    /// When polls last looked for tasks whose last lock expired.
    polls: tasks::Polls,
    /// The loops every replica runs: deployment convergence, the outbox worker, and (on a store
    /// replicas share) the listener for ends of instances held here.
    background: Mutex<Vec<JoinHandle<()>>>,
}

impl Engine {
    /// Loads every deployment, starts the lanes, the role loops and the background loops. Each
    /// role loop runs while this replica leads its role: every process on the embedded store, one
    /// replica at a time elected by lease on a store replicas share. The delivery dispatcher's
    /// first pass in each term is `recover`: every due row that was asked and not taken. The
    /// outbox worker sends through `sender`. Every time the engine reads and every wait it makes
    /// go through `clock` (the one the store was opened with, for a store that reads the
    /// process's clock).
    pub async fn start(
        store: Arc<dyn Store>,
        config: EngineConfig,
        sender: Arc<dyn Sender>,
        clock: Clock,
    ) -> Result<Arc<Engine>, Error> {
        let loaded = deploy::loadable(store.deployments(None).await?);
        let leadership = leadership::for_store(&store, &config, &clock);
        deploy::contend_for_singleton_channels(leadership.as_ref(), &loaded);
        let shared = Arc::new(Shared::new(store, config, clock.clone()));
        shared.metrics.deployed(&loaded);
        let live = Arc::new(Current::new(Arc::new(Live::default().with(loaded))));
        let lanes = Arc::new(Lanes::spawn(&shared, &live.get()));
        let deployments = Arc::new(Deployments::new(
            Arc::clone(&shared),
            Arc::clone(&lanes),
            Arc::clone(&leadership),
            Arc::clone(&live),
        ));
        let admin = Arc::new(Admin::new(Arc::clone(&shared), Arc::clone(&live)));
        let roles = RoleLoops::new(Arc::clone(&leadership), clock);
        deliveries::spawn(&roles, &shared, &lanes, &admin);
        sweep::spawn(&roles, &shared, &admin);
        history::spawn(&roles, &shared);
        retirement::spawn(&roles, &shared);
        scheduler::spawn(&roles, &shared, &lanes, &live);
        let (shutdown, _) = watch::channel(false);
        let mut background = converge::spawn(&shared, &deployments, &shutdown);
        background.extend(answers::spawn(&shared, &shutdown));
        background.push(sampler::spawn(&shared, &shutdown));
        background.push(outbox::spawn(
            Arc::clone(&shared),
            Arc::clone(&live),
            sender,
            shutdown.subscribe(),
        ));
        Ok(Arc::new(Engine {
            shared,
            lanes,
            live,
            deployments,
            admin,
            leadership,
            roles,
            shutdown,
            polls_end: watch::Sender::new(false),
            polls: tasks::Polls::default(),
            background: Mutex::new(background),
        }))
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.shared.store
    }

    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// The clock the engine reads and waits on.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    pub fn live(&self) -> Arc<Live> {
        self.live.get()
    }

    /// Who runs which singleton role, as this replica sees it.
    pub fn leadership(&self) -> &dyn Leadership {
        self.leadership.as_ref()
    }

    /// Lanes that have been on one request for longer than the claim timeout: their step has
    /// certainly lost its claim, so something below the engine is stuck (SPEC §4 readiness).
    pub fn wedged_lanes(&self) -> Vec<usize> {
        self.lanes
            .wedged(self.shared.config.claim_timeout.unsigned_abs())
    }

    pub fn lane_queue_depths(&self) -> Vec<usize> {
        self.lanes.queue_depths()
    }

    /// Sets the gauges that mirror in-memory state (lane queue depths, which roles this replica
    /// leads), and the backlog's gauges as last counted (under a sample interval ago: 0065).
    /// Cheap, so the server calls it on every scrape rather than on a timer.
    pub async fn publish_gauges(&self) {
        for (lane, depth) in self.lane_queue_depths().into_iter().enumerate() {
            metrics::lane_queue_depth(lane, depth);
        }
        let leading: Vec<metrics::Led> = (self.leadership.roles().into_iter())
            .map(|(role, term)| metrics::Led {
                channel: leadership::channel_role_tenant(&role).is_some(),
                leading: term.is_some_and(|term| term.current(&self.shared.clock)),
                role,
            })
            .collect();
        self.shared.metrics.lease_leaders(&leading);
        metrics::claims_in_flight(self.claims_in_flight(None));
        metrics::polls_waiting(self.shared.waiting.count());
        // Not counted in time, the store's gauges keep their last values, and the gauges of this
        // process — leadership above all — are read whatever the store does; readiness says
        // the store is away.
        if let Some(backlog) = self.scraped_backlog().await {
            self.shared.metrics.backlog(&backlog);
        }
    }

    /// What this replica's steps did over the last fifteen minutes, and the backlog beside
    /// them (decision 0061).
    pub fn pulse(&self) -> &Pulse {
        &self.shared.pulse
    }

    /// Steps in progress on this replica: its lanes on a request, or only those holding one of
    /// `tenant`'s instances.
    pub fn claims_in_flight(&self, tenant: Option<&str>) -> usize {
        self.lanes.busy(tenant)
    }

    /// The backlog a scrape reports: as the database counted it less than a sample interval
    /// ago, or counted now (decision 0065); `None` when it could not be counted in time.
    pub async fn scraped_backlog(&self) -> Option<Backlog> {
        self.shared.recent_backlog().await
    }

    /// What waits, counted in the database now (SPEC §8): `tenant`'s, or the fleet's when
    /// `None`.
    pub async fn backlog(&self, tenant: Option<&str>) -> Result<Backlog, Error> {
        Ok(self.shared.store.backlog(tenant).await?)
    }

    /// Checks, stores and activates a deployment for `tenant`: version n+1 becomes active on every
    /// lane before intake routes to it. A document naming a tenant must name `tenant`.
    pub async fn deploy(&self, tenant: &str, source: &str) -> Result<Deployed, DeployError> {
        self.deployments.deploy(tenant, source).await
    }

    /// A decoded message on a channel (SPEC §5.1): dedup, relay, start, buffer or refuse.
    pub async fn intake(&self, inbound: Inbound) -> Result<Answer, IntakeError> {
        intake::receive(&self.shared, &self.lanes, &self.live.get(), inbound).await
    }

    /// Cancels an instance under the administrative owner (SPEC §7.4's distinct owner).
    pub async fn cancel(&self, tenant: &str, id: &str) -> Result<StepOutcome, Error> {
        self.admin.cancel(tenant, id).await
    }

    /// Migrates a suspended or failed instance onto version `to_version` of its deployment, each
    /// token's node mapped by `map` (default: the same id), under the admin owner (SPEC §7.4).
    pub async fn migrate(
        &self,
        tenant: &str,
        id: &str,
        to_version: u32,
        map: BTreeMap<String, String>,
    ) -> Result<StepOutcome, Error> {
        self.admin.migrate(tenant, id, to_version, map).await
    }

    /// Restores a failed instance: its parks are re-armed and the failed node runs again — now
    /// when its claim is free, else as a durable delivery taken once it is (SPEC §5.6).
    pub async fn restore(&self, tenant: &str, id: &str) -> Result<Restored, Error> {
        self.admin.restore_or_ask(tenant, id).await
    }

    /// One page of a bulk repair: the request's action on each instance its selection finds,
    /// each alone (see [`bulk`]).
    pub async fn bulk(&self, tenant: &str, request: &bulk::Request) -> Result<bulk::Page, Error> {
        bulk::run(&self.shared, &self.admin, tenant, request).await
    }

    /// Locks up to `max` tasks, waiting up to `wait` for the first to become available. Empty when
    /// none did, or when the replica is shutting down.
    pub async fn poll_tasks(&self, request: PollRequest) -> Result<Vec<LockedTask>, Error> {
        // Kept only when recorded: a poll is the task path's most frequent call.
        let tenant = history_log::enabled().then(|| request.poll.tenant.clone());
        let locked = tasks::poll(
            &self.shared,
            &self.polls,
            self.polls_end.subscribe(),
            request,
        )
        .await?;
        if let Some(tenant) = &tenant {
            for task in &locked {
                history_log::task_locked(self.me(), tenant, task, history_log::Via::Poll);
            }
        }
        Ok(locked)
    }

    /// This replica's id, as the history log names it.
    fn me(&self) -> &str {
        &self.shared.config.replica_id
    }

    /// Answers every waiting long-poll now, and every later one without waiting: the replica is
    /// going away, and its workers should poll another. Call it before draining HTTP requests,
    /// which would otherwise wait out every poll.
    pub fn end_polls(&self) {
        self.polls_end.send_replace(true);
    }

    /// Completes a task; the instance resumes with `output` through its claim, at once: in the
    /// same transaction when the claim is free. With `take`, answers the task that step armed
    /// locked for the worker, if it armed one of the worker's topics ([`Take`]).
    pub async fn complete_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        output: &Value,
        take: Option<Take>,
    ) -> Result<Option<LockedTask>, Error> {
        let completion = Completion {
            tenant: tenant.to_owned(),
            task: id.to_owned(),
            lock_token: lock_token.to_owned(),
            output: output.clone(),
            take,
            in_place: true,
        };
        let taken = tasks::complete(&self.lanes, completion).await?;
        history_log::task_answered(self.me(), tenant, id, lock_token, TaskOutcome::Completed);
        if let Some(task) = &taken {
            history_log::task_locked(self.me(), tenant, task, history_log::Via::Take);
        }
        Ok(taken)
    }

    /// Records a failed attempt; returns where it left the task (available again after a
    /// backoff, failed, or terminal).
    pub async fn fail_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        failure: &TaskFailure,
    ) -> Result<TaskState, Error> {
        let state = tasks::fail(&self.shared, tenant, id, lock_token, failure).await?;
        let outcome = TaskOutcome::Failed(state.as_str());
        history_log::task_answered(self.me(), tenant, id, lock_token, outcome);
        Ok(state)
    }

    /// Hands a held task back without spending its attempt: available again at once.
    pub async fn release_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
    ) -> Result<(), Error> {
        tasks::release(&self.shared, tenant, id, lock_token).await?;
        history_log::task_answered(self.me(), tenant, id, lock_token, TaskOutcome::Released);
        Ok(())
    }

    /// Moves a held lock's deadline to `lock` from now; returns the new deadline.
    pub async fn extend_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        lock: SignedDuration,
    ) -> Result<Timestamp, Error> {
        let until = tasks::extend(&self.shared, tenant, id, lock_token, lock).await?;
        history_log::task_extended(self.me(), tenant, id, lock_token, until);
        Ok(until)
    }

    /// Waits up to `timeout` for an instance to end, and gives the reply its ending step gave;
    /// `None` if it runs still. For a redelivered message of an `ack: complete` channel, whose
    /// acknowledgement waits for the instance its first delivery started or resumed.
    pub async fn await_end(
        &self,
        key: &InstanceKey,
        timeout: std::time::Duration,
    ) -> Result<Option<Reply>, Error> {
        intake::await_end(&self.shared, key, timeout).await
    }

    /// Runs `work` while this replica leads `role`, started afresh at each term and dropped
    /// when the term ends, and before this replica gives its leases up: the consumer of a
    /// `singleton: true` channel (SPEC §6). The handle stops it for good.
    pub fn while_leading<W, F>(&self, role: &str, work: W) -> AbortHandle
    where
        W: FnMut() -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        self.roles.spawn(role, work)
    }

    pub fn held_callers(&self) -> usize {
        self.shared.settle.held()
    }

    /// Stops the role loops and gives up this replica's leases, so that other replicas take the
    /// roles at their next poll rather than after the TTL (the restart hang of the design text).
    /// Call it as soon as shutting down begins, before draining requests; steps already in the
    /// lanes finish under their claims. [`Engine::shutdown`] calls it too.
    pub async fn resign(&self) {
        self.roles.resign().await;
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
        self.lanes.stop().await;
    }
}
