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
    /// How many failed steps a delivery or a broker message gets (`sutra.deliveries.max-attempts`,
    /// docs/decisions/0047): the last fails its instance, or dead-letters the message.
    pub deliveries_max_attempts: u32,
    /// The wait after a delivery's or a broker message's first failed step
    /// (`sutra.deliveries.backoff`); it doubles per failure, never past `claim_timeout`.
    pub deliveries_backoff: SignedDuration,
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
    /// How often the `scheduler` leader looks for due schedule ticks (`sutra.schedules.poll`);
    /// a deploy here wakes it at once.
    pub schedules_poll: SignedDuration,
    /// Items a `for-each` loops over at most (`sutra.for-each.max-items`): past it the instance
    /// fails with `SUTRA.RUNTIME.FOR_EACH.TOO_MANY_ITEMS`. A loop's items and results live in
    /// its snapshot, rewritten by every step of the loop.
    pub for_each_max_items: u32,
    /// Calls nested below an instance a message started, at most (`sutra.call.max-depth`): a
    /// deeper call fails with `SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED`.
    pub call_max_depth: u32,
    /// Children an instance waits for at once, at most (`sutra.call.max-children`): one more
    /// call fails with `SUTRA.RUNTIME.CALL.CHILDREN_EXCEEDED`.
    pub call_max_children: u32,
    /// Units a step's expressions may spend together (`sutra.expressions.max-cost`, decision
    /// 0074): past it the instance fails with `SUTRA.RUNTIME.EXPRESSION.BUDGET`.
    pub expression_max_cost: u64,
    /// The largest value one expression may produce, in bytes of JSON
    /// (`sutra.expressions.max-value-bytes`): past it, the same.
    pub expression_max_value_bytes: usize,
    /// The largest an instance's variables may grow, in bytes of JSON
    /// (`sutra.instance.max-vars-bytes`): past it the node growing them fails with
    /// `SUTRA.RUNTIME.VARS.TOO_LARGE`.
    pub instance_max_vars_bytes: usize,
    /// Live instances a tenant may have (`sutra.tenants.max-live-instances`): a start past it is
    /// refused, and a call past it fails, with `SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED`.
    pub tenant_max_live_instances: u64,
    /// Schedule ticks a deployment's flows may make together per minute, at most
    /// (`sutra.schedules.max-ticks-per-minute`, decision 0083): a denser deployment is refused.
    pub schedule_max_ticks_per_minute: u32,
    /// The shortest `remind.every` a deployment may ask for (`sutra.remind.min-every`, at least
    /// the language's own floor of a second): each reminder is a step and a row of history, so a
    /// denser one is refused at deploy.
    pub remind_min_every: SignedDuration,
    /// The longest lock a task is granted (`sutra.tasks.max-lock`, decision 0078): a longer one
    /// asked for — by a poll, a completion's `take`, an extension or the task node's own `lock`
    /// — is granted up to it, never refused ([`EngineConfig::granted_lock`]).
    pub task_max_lock: SignedDuration,
    /// The brokers this replica has a URL for (`sutra.transports.{amqp,nats}.url`): a
    /// deployment declaring a channel on another broker is refused here.
    pub brokers: Vec<Transport>,
    /// Whether the metrics name what tenants chose — flows, task topics, singleton channels —
    /// with a `tenant` label, or fold them away (`sutra.metrics.tenant-labels`, decision 0076).
    pub metric_tenant_labels: bool,
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
            deliveries_max_attempts: 10,
            deliveries_backoff: SignedDuration::from_secs(1),
            outbox_batch: 100,
            outbox_backoff: SignedDuration::from_secs(1),
            outbox_poll: SignedDuration::from_secs(1),
            lease_ttl: SignedDuration::from_secs(30),
            lease_poll: SignedDuration::from_secs(10),
            history_retention: SignedDuration::from_hours(7 * 24),
            purge_interval: SignedDuration::from_mins(1),
            retire_interval: SignedDuration::from_mins(1),
            schedules_poll: SignedDuration::from_secs(1),
            for_each_max_items: sutra_core::step::FOR_EACH_ITEMS_DEFAULT,
            call_max_depth: sutra_core::step::CALL_DEPTH_DEFAULT,
            call_max_children: sutra_core::step::CALL_CHILDREN_DEFAULT,
            expression_max_cost: sutra_core::expr::EXPRESSION_COST_DEFAULT,
            expression_max_value_bytes: sutra_core::expr::EXPRESSION_VALUE_BYTES_DEFAULT,
            instance_max_vars_bytes: sutra_core::step::VARS_BYTES_DEFAULT,
            tenant_max_live_instances: 1_000_000,
            schedule_max_ticks_per_minute: 600,
            remind_min_every: sutra_core::check::PERIOD_MIN,
            task_max_lock: SignedDuration::from_hours(1),
            brokers: Vec::new(),
            metric_tenant_labels: false,
        }
    }
}

/// A configuration the engine cannot run with: the key at fault, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {reason}")]
pub struct Refusal {
    pub key: &'static str,
    pub reason: String,
}

/// The longest `sutra.engine.group.window` may be: every member of a group waits for the window
/// before it is answered, so a long one only adds latency — more than a second is a mistake,
/// not a setting.
const GROUP_WINDOW_MAX: SignedDuration = SignedDuration::from_secs(1);

impl EngineConfig {
    /// Refuses what the engine cannot run with, each key alone and the keys together
    /// (docs/decisions/0044-what-the-configuration-refuses.md). The fields no key sets are the
    /// engine's own and not checked.
    pub fn validate(&self) -> Result<(), Refusal> {
        at_least_one("sutra.engine.lanes", self.lanes)?;
        at_least_one("sutra.engine.group.max", self.group_max)?;
        at_least_one("sutra.instance.max-recoveries", self.max_recoveries)?;
        at_least_one("sutra.timers.batch", self.deliveries_batch)?;
        at_least_one("sutra.outbox.batch", self.outbox_batch)?;
        at_least_one("sutra.for-each.max-items", self.for_each_max_items)?;
        at_least_one("sutra.call.max-depth", self.call_max_depth)?;
        at_least_one("sutra.call.max-children", self.call_max_children)?;
        at_least_one("sutra.expressions.max-cost", self.expression_max_cost)?;
        at_least_one(
            "sutra.expressions.max-value-bytes",
            self.expression_max_value_bytes,
        )?;
        at_least_one(
            "sutra.instance.max-vars-bytes",
            self.instance_max_vars_bytes,
        )?;
        at_least_one(
            "sutra.tenants.max-live-instances",
            self.tenant_max_live_instances,
        )?;
        at_least_one(
            "sutra.schedules.max-ticks-per-minute",
            self.schedule_max_ticks_per_minute,
        )?;
        at_least_one(
            "sutra.deliveries.max-attempts",
            self.deliveries_max_attempts,
        )?;
        for (key, duration) in [
            ("sutra.deliveries.backoff", self.deliveries_backoff),
            ("sutra.instance.sweep-interval", self.sweep_interval),
            ("sutra.outbox.backoff", self.outbox_backoff),
            ("sutra.lease.ttl", self.lease_ttl),
            ("sutra.lease.poll", self.lease_poll),
            ("sutra.history.retention", self.history_retention),
            ("sutra.history.purge-interval", self.purge_interval),
            ("sutra.deployments.retire-interval", self.retire_interval),
            ("sutra.schedules.poll", self.schedules_poll),
            ("sutra.tasks.max-lock", self.task_max_lock),
        ] {
            positive(key, duration)?;
        }
        self.remind_floor_is_the_languages_or_longer()?;
        self.group_window_is_short()?;
        self.claims_outlast_a_group()?;
        self.leaders_renew_in_time()
    }

    /// How long a delivery or a broker message waits after its `failures`-th failed step
    /// (counting from 1): the backoff, doubled per failure before it, never longer than a claim
    /// timeout, the bound look-again keeps too.
    pub fn failure_backoff(&self, failures: u32) -> SignedDuration {
        let doublings = failures.saturating_sub(1).min(30);
        self.deliveries_backoff
            .saturating_mul(1 << doublings)
            .min(self.claim_timeout)
    }

    /// The lock a task is granted when `asked` is asked for it: at most `sutra.tasks.max-lock`,
    /// so that a dead worker's task is available again within the ceiling (decision 0078). A
    /// longer lock is granted up to the ceiling rather than refused, as the OpenAPI document
    /// takes any positive duration (decision 0062); the answer's `lock_expires_at` tells the
    /// worker the lock it got. Every lock is set through here: a poll's, a completion's `take`,
    /// an extension, and a task node's own `lock` as its task is armed.
    pub fn granted_lock(&self, asked: SignedDuration) -> SignedDuration {
        asked.min(self.task_max_lock)
    }

    /// The language refuses a reminder more often than once a second whatever the engine says;
    /// a lower floor here would promise what no flow can ask for.
    fn remind_floor_is_the_languages_or_longer(&self) -> Result<(), Refusal> {
        if self.remind_min_every < sutra_core::check::PERIOD_MIN {
            return refuse(
                "sutra.remind.min-every",
                "expected PT1S or longer: the language refuses a reminder more often than once a second",
            );
        }
        Ok(())
    }

    fn group_window_is_short(&self) -> Result<(), Refusal> {
        let window = self.group_window;
        if window.is_negative() || window > GROUP_WINDOW_MAX {
            return refuse(
                "sutra.engine.group.window",
                "expected a duration from PT0S to PT1S",
            );
        }
        Ok(())
    }

    /// A lane holds a group's first member for up to the window, waiting for more, before the
    /// group's transaction begins: a member handed over is committed no sooner than that. A
    /// delivery handed out is due again one claim timeout later, so with a timeout no longer than
    /// the window it would be dispatched anew — each dispatch counted towards poisoning its
    /// instance — before its step could commit it.
    fn claims_outlast_a_group(&self) -> Result<(), Refusal> {
        let (timeout, window) = (self.claim_timeout, self.group_window);
        if timeout <= window {
            return refuse(
                "sutra.instance.claim-timeout",
                format!(
                    "expected longer than sutra.engine.group.window ({window}), which a step can \
                     last: lengthen the claim timeout or shorten the window"
                ),
            );
        }
        Ok(())
    }

    /// A leader renews every poll and stops at four fifths of the TTL after a renewal it sent
    /// (docs/decisions/0018): a poll of half the TTL or more would leave it no second try before
    /// it stops, and one of four fifths or more would make it stop between any two renewals.
    fn leaders_renew_in_time(&self) -> Result<(), Refusal> {
        let ttl = self.lease_ttl;
        if self.lease_poll >= ttl / 2 {
            return refuse(
                "sutra.lease.poll",
                format!(
                    "expected less than half of sutra.lease.ttl ({ttl}), so that a leader can \
                     renew more than once before its lease runs out"
                ),
            );
        }
        Ok(())
    }
}

fn refuse(key: &'static str, reason: impl Into<String>) -> Result<(), Refusal> {
    Err(Refusal {
        key,
        reason: reason.into(),
    })
}

fn at_least_one<T: PartialOrd + From<u8>>(key: &'static str, value: T) -> Result<(), Refusal> {
    if value < T::from(1) {
        return refuse(key, "expected a whole number greater than 0");
    }
    Ok(())
}

/// A zero interval would loop without pause; a zero backoff would resend a failing row in a
/// tight loop; a zero TTL or retention would end what it bounds as it begins.
fn positive(key: &'static str, duration: SignedDuration) -> Result<(), Refusal> {
    if !duration.is_positive() {
        return refuse(key, "expected a duration greater than zero");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One field of the default configuration changed.
    type Change = fn(&mut EngineConfig);

    /// The key the default configuration, changed by `change`, is refused for.
    fn refused(change: impl FnOnce(&mut EngineConfig)) -> &'static str {
        let mut config = EngineConfig::default();
        change(&mut config);
        config.validate().expect_err("refused").key
    }

    #[test]
    fn the_default_configuration_runs() {
        assert_eq!(EngineConfig::default().validate(), Ok(()));
    }

    #[test]
    fn zero_lanes_are_refused() {
        assert_eq!(refused(|c| c.lanes = 0), "sutra.engine.lanes");
    }

    #[test]
    fn a_claim_timeout_no_longer_than_the_group_window_is_refused() {
        let window = SignedDuration::from_millis(500);
        let with = |claim_timeout| {
            move |c: &mut EngineConfig| {
                c.group_window = window;
                c.claim_timeout = claim_timeout;
            }
        };
        assert_eq!(refused(with(window)), "sutra.instance.claim-timeout");
        assert_eq!(
            refused(with(SignedDuration::ZERO)),
            "sutra.instance.claim-timeout"
        );
        let mut config = EngineConfig::default();
        with(SignedDuration::from_secs(1))(&mut config);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn a_lease_poll_of_half_the_ttl_or_more_is_refused() {
        let with = |ttl: i64, poll: i64| {
            move |c: &mut EngineConfig| {
                c.lease_ttl = SignedDuration::from_secs(ttl);
                c.lease_poll = SignedDuration::from_secs(poll);
            }
        };
        assert_eq!(refused(with(10, 5)), "sutra.lease.poll");
        assert_eq!(refused(with(10, 10)), "sutra.lease.poll");
        let mut config = EngineConfig::default();
        with(3, 1)(&mut config);
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn a_group_window_past_a_second_or_before_zero_is_refused() {
        for window in [
            SignedDuration::from_millis(1001),
            SignedDuration::from_nanos(-1),
        ] {
            assert_eq!(
                refused(|c| c.group_window = window),
                "sutra.engine.group.window"
            );
        }
    }

    #[test]
    fn a_remind_floor_below_the_languages_second_is_refused() {
        assert_eq!(
            refused(|c| c.remind_min_every = SignedDuration::from_millis(999)),
            "sutra.remind.min-every"
        );
        let config = EngineConfig {
            remind_min_every: SignedDuration::from_mins(1),
            ..EngineConfig::default()
        };
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn the_failure_backoff_doubles_up_to_the_claim_timeout() {
        let config = EngineConfig {
            deliveries_backoff: SignedDuration::from_secs(1),
            claim_timeout: SignedDuration::from_secs(5),
            ..EngineConfig::default()
        };
        let waits: Vec<i64> = (1..=5)
            .map(|failures| config.failure_backoff(failures).as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        assert_eq!(config.failure_backoff(u32::MAX).as_secs(), 5);
    }

    #[test]
    fn a_count_of_zero_is_refused() {
        let zeroed: [(Change, &str); 13] = [
            (
                |c| c.schedule_max_ticks_per_minute = 0,
                "sutra.schedules.max-ticks-per-minute",
            ),
            (
                |c| c.tenant_max_live_instances = 0,
                "sutra.tenants.max-live-instances",
            ),
            (|c| c.expression_max_cost = 0, "sutra.expressions.max-cost"),
            (
                |c| c.expression_max_value_bytes = 0,
                "sutra.expressions.max-value-bytes",
            ),
            (
                |c| c.instance_max_vars_bytes = 0,
                "sutra.instance.max-vars-bytes",
            ),
            (|c| c.for_each_max_items = 0, "sutra.for-each.max-items"),
            (|c| c.call_max_depth = 0, "sutra.call.max-depth"),
            (|c| c.call_max_children = 0, "sutra.call.max-children"),
            (|c| c.group_max = 0, "sutra.engine.group.max"),
            (
                |c| c.deliveries_max_attempts = 0,
                "sutra.deliveries.max-attempts",
            ),
            (|c| c.max_recoveries = 0, "sutra.instance.max-recoveries"),
            (|c| c.deliveries_batch = 0, "sutra.timers.batch"),
            (|c| c.outbox_batch = 0, "sutra.outbox.batch"),
        ];
        for (change, key) in zeroed {
            assert_eq!(refused(change), key);
        }
    }

    #[test]
    fn a_duration_of_zero_is_refused() {
        let zeroed: [(Change, &str); 9] = [
            (
                |c| c.deliveries_backoff = SignedDuration::ZERO,
                "sutra.deliveries.backoff",
            ),
            (
                |c| c.sweep_interval = SignedDuration::ZERO,
                "sutra.instance.sweep-interval",
            ),
            (
                |c| c.outbox_backoff = SignedDuration::ZERO,
                "sutra.outbox.backoff",
            ),
            (|c| c.lease_ttl = SignedDuration::ZERO, "sutra.lease.ttl"),
            (|c| c.lease_poll = SignedDuration::ZERO, "sutra.lease.poll"),
            (
                |c| c.history_retention = SignedDuration::ZERO,
                "sutra.history.retention",
            ),
            (
                |c| c.purge_interval = SignedDuration::ZERO,
                "sutra.history.purge-interval",
            ),
            (
                |c| c.retire_interval = SignedDuration::ZERO,
                "sutra.deployments.retire-interval",
            ),
            (
                |c| c.task_max_lock = SignedDuration::ZERO,
                "sutra.tasks.max-lock",
            ),
        ];
        for (change, key) in zeroed {
            assert_eq!(refused(change), key);
        }
    }

    #[test]
    fn a_lock_past_the_ceiling_is_granted_up_to_it_and_a_shorter_one_as_asked() {
        let config = EngineConfig {
            task_max_lock: SignedDuration::from_secs(2),
            ..EngineConfig::default()
        };
        let ceiling = SignedDuration::from_secs(2);
        let century = SignedDuration::from_hours(3_650_000 * 24);
        assert_eq!(config.granted_lock(century), ceiling);
        assert_eq!(config.granted_lock(ceiling), ceiling);
        let shorter = SignedDuration::from_millis(1500);
        assert_eq!(config.granted_lock(shorter), shorter);
        assert_eq!(
            EngineConfig::default().task_max_lock,
            SignedDuration::from_hours(1)
        );
    }
}
