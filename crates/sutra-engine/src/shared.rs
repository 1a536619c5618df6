//! What every part of the engine shares: the store, the configuration, the clock, the settle
//! registry and the wake-ups, and the owner ids a replica claims as.

use std::sync::Arc;

use sutra_store::{Clock, Owner, Store};
use tokio::sync::Notify;

use crate::config::EngineConfig;
use crate::settle::SettleRegistry;
use crate::test_switches;
use crate::waiting::{Availability, Waiting};

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
}

impl Shared {
    pub fn new(store: Arc<dyn Store>, config: EngineConfig, clock: Clock) -> Shared {
        Shared {
            store,
            config,
            clock,
            settle: SettleRegistry::default(),
            deliveries_due: Notify::new(),
            outbox_due: Notify::new(),
            schedules_changed: Notify::new(),
            tasks: Arc::default(),
            waiting: Waiting::default(),
        }
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
