//! What every part of the engine shares: the store, the configuration, the clock, the settle
//! registry and the wake-ups, the pulse and the last backlog counted, and the owner ids a
//! replica claims as.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sutra_core::snapshot::InstanceInfo;
use sutra_store::{Backlog, Clock, Owner, Store};
use tokio::sync::Notify;
use tracing::debug;

use crate::config::EngineConfig;
use crate::pulse::{Pulse, SAMPLE_INTERVAL};
use crate::quota::LiveInstances;
use crate::settle::SettleRegistry;
use crate::waiting::{Availability, Waiting};
use crate::{metrics, test_switches};

/// How long a count of the backlog is waited for (see [`Shared::count_backlog`]): far above a
/// healthy count's milliseconds, and under a scraper's usual timeout.
const BACKLOG_PATIENCE: Duration = Duration::from_secs(2);

/// What the background loops, the lanes and the callers share.
pub(crate) struct Shared {
    pub store: Arc<dyn Store>,
    pub config: EngineConfig,
    /// Every time the engine reads and every wait it makes (decision 0045): the system's in
    /// production, a manual clock in the engine's tests.
    pub clock: Clock,
    pub settle: SettleRegistry,
    /// Wakes the delivery dispatcher: something became due now.
    pub deliveries_due: Notify,
    /// Wakes the outbox worker: a commit wrote outbox rows.
    pub outbox_due: Notify,
    /// Wakes the scheduler: a version was activated here, whose schedules it writes.
    pub schedules_changed: Notify,
    /// Wakes every long-poll: a task may have become available (a commit armed one, a failed
    /// attempt was rescheduled).
    pub tasks: Arc<Availability>,
    /// The long-polls waiting here, for the steps that arm tasks to hand them over.
    pub waiting: Waiting,
    /// What this replica's steps did over the last minutes (decision 0061).
    pub pulse: Pulse,
    /// The series that would name what tenants chose, labelled as configured (decision 0076).
    pub metrics: metrics::Exporter,
    /// Every tenant's live instances as last counted, against its quota.
    pub live: LiveInstances,
    /// The last backlog counted, and when (see [`Shared::recent_backlog`]).
    counted: Mutex<Option<(Instant, Backlog)>>,
}

impl Shared {
    pub fn new(store: Arc<dyn Store>, config: EngineConfig, clock: Clock) -> Shared {
        Shared {
            store,
            metrics: metrics::Exporter::new(config.metric_tenant_labels),
            live: LiveInstances::new(config.tenant_max_live_instances),
            config,
            settle: SettleRegistry::default(),
            deliveries_due: Notify::new(),
            outbox_due: Notify::new(),
            schedules_changed: Notify::new(),
            tasks: Arc::default(),
            waiting: Waiting::default(),
            pulse: Pulse::new(clock.now()),
            counted: Mutex::new(None),
            clock,
        }
    }

    /// One step of `instance`'s ended, `took` after it started: `outcome` is `committed`, or
    /// why it did not commit. Counted in the process's metrics, and in this replica's pulse
    /// for the replica and for the instance's tenant.
    pub fn step_ended(&self, instance: &InstanceInfo, outcome: &'static str, took: Duration) {
        self.metrics.step(instance, outcome, took);
        self.pulse
            .step(&instance.tenant, outcome == metrics::COMMITTED, took);
    }

    /// What waits for the fleet, as the database counts it now, kept for the scrapes that follow
    /// ([`Shared::recent_backlog`]); `None` when it could not. A database cut off mid-statement
    /// answers nothing, and the client sets no statement timeout: the count is waited for
    /// [`BACKLOG_PATIENCE`] and no longer, so that whoever asks — a scrape, the pulse's sampler —
    /// goes on whatever the store does.
    pub async fn count_backlog(&self) -> Option<Backlog> {
        let began = self.clock.instant();
        match self
            .clock
            .timeout(BACKLOG_PATIENCE, self.store.backlog(None))
            .await
        {
            Ok(Ok(backlog)) => {
                *self.last_count() = Some((began, backlog.clone()));
                Some(backlog)
            }
            Ok(Err(error)) => {
                debug!(%error, "could not count the backlog");
                None
            }
            Err(_) => {
                debug!("the backlog count took too long; left out");
                None
            }
        }
    }

    /// Every tenant's live instances, as the database counts them now, for their quotas; left
    /// as last counted when it cannot, within [`BACKLOG_PATIENCE`].
    pub async fn count_live(&self) {
        let mark = self.live.mark();
        match self
            .clock
            .timeout(BACKLOG_PATIENCE, self.store.live_by_tenant())
            .await
        {
            Ok(Ok(counted)) => self.live.recount(counted, &mark),
            Ok(Err(error)) => debug!(%error, "could not count live instances"),
            Err(_) => debug!("the count of live instances took too long; left as it was"),
        }
    }

    /// The backlog as counted less than a [`SAMPLE_INTERVAL`] ago, or counted now (decision
    /// 0065): what a scrape reports. The pulse's sampler counts once an interval whether anyone
    /// scrapes or not, so a scrape between its samples reads no row — at volume a count reads
    /// every live instance's and available task's index entry, tens of milliseconds a scrape.
    pub async fn recent_backlog(&self) -> Option<Backlog> {
        let now = self.clock.instant();
        if let Some((at, backlog)) = self.last_count().as_ref()
            && now.saturating_duration_since(*at) < SAMPLE_INTERVAL
        {
            return Some(backlog.clone());
        }
        self.count_backlog().await
    }

    fn last_count(&self) -> std::sync::MutexGuard<'_, Option<(Instant, Backlog)>> {
        // A count is replaced whole: a holder that panicked left a whole one.
        self.counted
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `{replica_id}/lane-{i}`: lane-scoped, so that *same owner ⇒ same lane ⇒ serialized*.
    pub fn lane_owner(&self, lane: usize) -> Owner {
        let lane = test_switches::owner_lane(lane);
        Owner(format!("{}/lane-{lane}", self.config.replica_id))
    }

    /// `{replica_id}/admin`: no lane can produce it, so an administrative claim never re-enters
    /// past a step in flight on this replica. Administrative steps run one at a time
    /// (`Admin::administering`), so *same owner ⇒ serialized* holds for it as for a lane.
    pub fn admin_owner(&self) -> Owner {
        Owner(format!("{}/admin", self.config.replica_id))
    }
}
