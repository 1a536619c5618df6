//! The engine's configuration: what the server reads from `sutra.*` keys and hands to
//! `Engine::start`.

use jiff::SignedDuration;
use sutra_core::model::Transport;

#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Stable for the life of the process; owner ids are derived from it.
    pub replica_id: String,
    pub lanes: usize,
    pub lane_queue_depth: usize,
    /// The most steps one group commit carries (`sutra.engine.group.max`, decision 0024).
    pub group_max: usize,
    /// How long a lane holds a group open for more work once its queue is empty
    /// (`sutra.engine.group.window`); zero takes only what is already queued.
    pub group_window: SignedDuration,
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
    /// failure, up to the outbox's `BACKOFF_CAP`.
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
    /// How often the `retirement-gate` leader looks for draining versions to retire
    /// (`sutra.deployments.retire-interval`).
    pub retire_interval: SignedDuration,
    /// The brokers this replica has a URL for (`sutra.transports.{amqp,nats}.url`): a
    /// deployment declaring a channel on another broker is refused here.
    pub brokers: Vec<Transport>,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            replica_id: "sutra".into(),
            lanes: 1,
            lane_queue_depth: 1024,
            group_max: 64,
            group_window: SignedDuration::ZERO,
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
            retire_interval: SignedDuration::from_mins(1),
            brokers: Vec::new(),
        }
    }
}
