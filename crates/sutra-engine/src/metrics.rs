//! The engine's Prometheus metrics (SPEC §8), recorded through the `metrics` facade: the server
//! installs the one recorder per process, and without one every call here is a no-op.
//!
//! The names live here and nowhere else, so that docs/decisions/0020-metrics.md has one place to
//! agree with. Counters and the histograms are recorded where the event happens, and registered
//! at zero with the recorder ([`register`]); the gauges that mirror in-memory state (lane queue
//! depth, lease leadership) are refreshed by `Engine::publish_gauges` when `/metrics` is scraped.
//!
//! The series that would name what a tenant chose — a step's flow, a task's topic, a singleton
//! channel's lease — go through an [`Exporter`], which folds those names away unless
//! `sutra.metrics.tenant-labels` asks for them (docs/decisions/0076).

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use sutra_core::model::Deployment;
use sutra_core::snapshot::{InstanceInfo, Status};
use sutra_store::DeploymentRecord;

pub const STEPS: &str = "sutra_steps_total";
pub const STEP_DURATION: &str = "sutra_step_duration_seconds";
pub const CLAIM_BOUNCES: &str = "sutra_claim_bounces_total";
pub const GROUP_MEMBERS: &str = "sutra_group_members";
pub const LANE_QUEUE_DEPTH: &str = "sutra_lane_queue_depth";
pub const SWEEPS_CLEARED: &str = "sutra_sweeps_cleared_total";
pub const LEASE_LEADER: &str = "sutra_lease_leader";
pub const INBOX_BACKLOG: &str = "sutra_inbox_backlog";
pub const OUTBOX_BACKLOG: &str = "sutra_outbox_backlog";
pub const TASKS_AVAILABLE: &str = "sutra_tasks_available";
pub const TASKS_LOCKED: &str = "sutra_tasks_locked";
pub const INSTANCES: &str = "sutra_instances";
pub const CLAIMS_IN_FLIGHT: &str = "sutra_claims_in_flight";
pub const POLLS_WAITING: &str = "sutra_task_polls_waiting";
pub const DELIVERY_FAILURES: &str = "sutra_delivery_failures_total";
pub const SCHEDULE_TICKS: &str = "sutra_schedule_ticks_total";

/// Every series the engine exports.
pub const SERIES: &[&str] = &[
    STEPS,
    STEP_DURATION,
    CLAIM_BOUNCES,
    GROUP_MEMBERS,
    LANE_QUEUE_DEPTH,
    SWEEPS_CLEARED,
    LEASE_LEADER,
    INBOX_BACKLOG,
    OUTBOX_BACKLOG,
    TASKS_AVAILABLE,
    TASKS_LOCKED,
    INSTANCES,
    CLAIMS_IN_FLIGHT,
    POLLS_WAITING,
    DELIVERY_FAILURES,
    SCHEDULE_TICKS,
];

/// Registers at zero the counters and histograms whose labels are a fixed set, so that an alert
/// on one has a value to read on a healthy replica before its first event. The gauges need no
/// registering: every scrape sets them.
pub fn register() {
    for name in [STEP_DURATION, GROUP_MEMBERS] {
        // Registered, the histogram is exported with empty buckets.
        let _registered = histogram!(name);
    }
    for path in BouncePath::ALL {
        counter!(CLAIM_BOUNCES, "path" => path.label()).increment(0);
    }
    counter!(SWEEPS_CLEARED).increment(0);
    for failure in DeliveryFailure::ALL {
        let (path, outcome) = failure.labels();
        counter!(DELIVERY_FAILURES, "path" => path, "outcome" => outcome).increment(0);
    }
    for outcome in TickOutcome::ALL {
        counter!(SCHEDULE_TICKS, "outcome" => outcome.label()).increment(0);
    }
}

/// What the scheduler did with a due tick (the `outcome` label of [`SCHEDULE_TICKS`],
/// docs/decisions/0056).
#[derive(Debug, Clone, Copy)]
pub enum TickOutcome {
    /// An instance was started (or found started by an earlier leader).
    Fired,
    /// Skipped by `overlap: skip`: the last instance still runs.
    Overlapped,
    /// Missed while no replica led the role, and not caught up.
    Missed,
    /// Skipped: the tenant was at its live-instance quota (decision 0079).
    OverQuota,
}

impl TickOutcome {
    const ALL: [TickOutcome; 4] = [
        TickOutcome::Fired,
        TickOutcome::Overlapped,
        TickOutcome::Missed,
        TickOutcome::OverQuota,
    ];

    fn label(self) -> &'static str {
        match self {
            TickOutcome::Fired => "fired",
            TickOutcome::Overlapped => "overlapped",
            TickOutcome::Missed => "missed",
            TickOutcome::OverQuota => "over_quota",
        }
    }
}

/// A due tick the scheduler fired or skipped.
pub(crate) fn schedule_tick(outcome: TickOutcome) {
    counter!(SCHEDULE_TICKS, "outcome" => outcome.label()).increment(1);
}

/// What followed a failed step of a delivery or a broker message (the `path` and `outcome`
/// labels of [`DELIVERY_FAILURES`], docs/decisions/0047).
#[derive(Debug, Clone, Copy)]
pub enum DeliveryFailure {
    /// A durable delivery backed off for another attempt.
    Retried,
    /// A durable delivery past the ceiling: its instance was failed in place.
    Exhausted,
    /// A durable delivery whose instance's snapshot cannot be decoded: deferred again, since
    /// the failure cannot be written into it.
    Unreadable,
    /// A broker message requeued with backoff for another attempt.
    BrokerRetried,
    /// A broker message past the ceiling: rejected without requeue (AMQP) or terminated (NATS).
    DeadLettered,
}

impl DeliveryFailure {
    const ALL: [DeliveryFailure; 5] = [
        DeliveryFailure::Retried,
        DeliveryFailure::Exhausted,
        DeliveryFailure::Unreadable,
        DeliveryFailure::BrokerRetried,
        DeliveryFailure::DeadLettered,
    ];

    fn labels(self) -> (&'static str, &'static str) {
        match self {
            DeliveryFailure::Retried => ("delivery", "retried"),
            DeliveryFailure::Exhausted => ("delivery", "exhausted"),
            DeliveryFailure::Unreadable => ("delivery", "unreadable"),
            DeliveryFailure::BrokerRetried => ("broker", "retried"),
            DeliveryFailure::DeadLettered => ("broker", "dead_lettered"),
        }
    }
}

/// One failed step of a delivery or a broker message, and what followed it.
pub fn delivery_failure(failure: DeliveryFailure) {
    let (path, outcome) = failure.labels();
    counter!(DELIVERY_FAILURES, "path" => path, "outcome" => outcome).increment(1);
}

/// Which way work reached a claim that refused it (the `path` label of [`CLAIM_BOUNCES`]).
#[derive(Debug, Clone, Copy)]
pub enum BouncePath {
    /// A relay handed to a lane by the caller's task.
    Relay,
    /// Any delivery the dispatcher takes: timers, task completions, matched buffered messages.
    Timer,
    /// Cancel, restore and the poisoning of a dying instance.
    Admin,
}

impl BouncePath {
    const ALL: [BouncePath; 3] = [BouncePath::Relay, BouncePath::Timer, BouncePath::Admin];

    fn label(self) -> &'static str {
        match self {
            BouncePath::Relay => "relay",
            BouncePath::Timer => "timer",
            BouncePath::Admin => "admin",
        }
    }
}

/// The `outcome` of a step that committed; every other outcome says why it did not.
pub(crate) const COMMITTED: &str = "committed";
/// A step whose claim was lost before its commit.
pub(crate) const STALE: &str = "stale";
/// A step its instance's state did not allow.
pub(crate) const REJECTED: &str = "rejected";
/// A step whose instance's deployment version is not loaded here.
pub(crate) const UNPINNED: &str = "unpinned";
/// A step that panicked.
pub(crate) const PANICKED: &str = "panicked";
/// A step that failed for any other reason.
pub(crate) const FAILED: &str = "failed";

/// Every `outcome` of [`STEPS`], each registered at zero for every series of steps.
const OUTCOMES: [&str; 6] = [COMMITTED, STALE, REJECTED, UNPINNED, PANICKED, FAILED];

/// The `role` under which the singleton channels' leases are folded: how many this replica
/// leads.
const CHANNEL_ROLES: &str = "channel";

/// Whether the series name what tenants chose (`sutra.metrics.tenant-labels`, decision 0076).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Labels {
    /// No flow, topic or channel, and no tenant: each series folded over them, so that
    /// `/metrics`, open to whoever reaches it, shows nothing a tenant named.
    Folded,
    /// `tenant`, and the flow, topic or channel it named: the operator asked for them, and
    /// `/metrics` then takes the operator's token where tokens are configured.
    PerTenant,
}

/// A lease role, and whether this replica leads it now.
pub(crate) struct Led {
    pub role: String,
    /// Whether it is a singleton channel's role, which names a tenant's channel.
    pub channel: bool,
    pub leading: bool,
}

/// Records the series that would name what tenants chose, as [`Labels`] says.
pub(crate) struct Exporter {
    labels: Labels,
    /// The (tenant, topic) pairs the last gauges reported available tasks for.
    topics_reported: Mutex<BTreeSet<(String, String)>>,
}

impl Exporter {
    /// Labelled per tenant when `tenant_labels`, else folded.
    pub(crate) fn new(tenant_labels: bool) -> Exporter {
        Exporter {
            labels: if tenant_labels {
                Labels::PerTenant
            } else {
                Labels::Folded
            },
            topics_reported: Mutex::new(BTreeSet::new()),
        }
    }

    /// One step's end, `took` after it started: `outcome` is [`COMMITTED`], or why it did not
    /// commit.
    pub(crate) fn step(&self, instance: &InstanceInfo, outcome: &'static str, took: Duration) {
        let steps = match self.labels {
            Labels::Folded => counter!(STEPS, "outcome" => outcome),
            Labels::PerTenant => counter!(
                STEPS,
                "tenant" => instance.tenant.clone(),
                "flow" => instance.flow.clone(),
                "outcome" => outcome
            ),
        };
        steps.increment(1);
        histogram!(STEP_DURATION).record(took.as_secs_f64());
    }

    /// Registers at zero the step series of what is deployed, once `versions` are loaded, so
    /// that a flow's series has a value to read before its first step (as Prometheus clients
    /// export the label values they know): per tenant and flow, or folded once for all.
    pub(crate) fn deployed(&self, versions: &[(DeploymentRecord, Deployment)]) {
        match self.labels {
            Labels::Folded => {
                for outcome in OUTCOMES {
                    counter!(STEPS, "outcome" => outcome).increment(0);
                }
            }
            Labels::PerTenant => {
                for (record, deployment) in versions {
                    for flow in deployment.flows.keys() {
                        for outcome in OUTCOMES {
                            counter!(
                                STEPS,
                                "tenant" => record.tenant.clone(),
                                "flow" => flow.clone(),
                                "outcome" => outcome
                            )
                            .increment(0);
                        }
                    }
                }
            }
        }
    }

    /// The scaling signal (SPEC §8), as the database counts it. Per tenant, a topic reported
    /// before that has no available task now is set to 0 rather than left at its last value.
    pub(crate) fn backlog(&self, backlog: &sutra_store::Backlog) {
        gauge!(INBOX_BACKLOG).set(backlog.inbox as f64);
        gauge!(OUTBOX_BACKLOG).set(backlog.outbox as f64);
        gauge!(TASKS_LOCKED).set(backlog.tasks_locked as f64);
        match self.labels {
            Labels::Folded => gauge!(TASKS_AVAILABLE).set(backlog.available() as f64),
            Labels::PerTenant => self.tasks_available(backlog),
        }
        for status in [
            Status::Suspended,
            Status::Completed,
            Status::Cancelled,
            Status::Failed,
        ] {
            let count = backlog
                .instances
                .iter()
                .find(|(counted, _)| *counted == status)
                .map_or(0, |(_, n)| *n);
            gauge!(INSTANCES, "status" => status.as_str()).set(count as f64);
        }
    }

    /// The available tasks by tenant and topic, the pairs reported before and gone now at 0.
    fn tasks_available(&self, backlog: &sutra_store::Backlog) {
        let now: BTreeSet<(String, String)> = backlog
            .tasks_available
            .iter()
            .map(|available| (available.tenant.clone(), available.topic.clone()))
            .collect();
        let mut reported = self
            .topics_reported
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (tenant, topic) in reported.difference(&now) {
            gauge!(TASKS_AVAILABLE, "tenant" => tenant.clone(), "topic" => topic.clone()).set(0.0);
        }
        for available in &backlog.tasks_available {
            gauge!(
                TASKS_AVAILABLE,
                "tenant" => available.tenant.clone(),
                "topic" => available.topic.clone()
            )
            .set(available.tasks as f64);
        }
        *reported = now;
    }

    /// Which roles this replica leads (1) or not (0). Folded, the singleton channels' roles —
    /// `channel:{tenant}:{channel}` — are one series, `role="channel"`, counting those it leads.
    pub(crate) fn lease_leaders(&self, roles: &[Led]) {
        let mut channels_led = 0;
        for led in roles {
            if led.channel && self.labels == Labels::Folded {
                channels_led += u32::from(led.leading);
            } else {
                let leading = if led.leading { 1.0 } else { 0.0 };
                gauge!(LEASE_LEADER, "role" => led.role.clone()).set(leading);
            }
        }
        if self.labels == Labels::Folded {
            gauge!(LEASE_LEADER, "role" => CHANNEL_ROLES).set(f64::from(channels_led));
        }
    }
}

/// One group commit's size: how many steps shared its transaction (decision 0024). Groups of one
/// mean the lanes do not queue, and group commit saves nothing.
pub(crate) fn group_members(members: usize) {
    histogram!(GROUP_MEMBERS).record(members as f64);
}

pub(crate) fn claim_bounce(path: BouncePath) {
    counter!(CLAIM_BOUNCES, "path" => path.label()).increment(1);
}

pub(crate) fn sweeps_cleared(cleared: u64) {
    counter!(SWEEPS_CLEARED).increment(cleared);
}

pub(crate) fn lane_queue_depth(lane: usize, depth: usize) {
    gauge!(LANE_QUEUE_DEPTH, "lane" => lane.to_string()).set(depth as f64);
}

/// Steps in progress on this replica: its lanes on a request (SPEC §8: a busy fleet with an
/// empty backlog must not scale to zero).
pub(crate) fn claims_in_flight(busy: usize) {
    gauge!(CLAIMS_IN_FLIGHT).set(busy as f64);
}

/// Long-polls waiting on this replica with room for a task: idle worker capacity, which a step
/// arming a task hands it to at once (decision 0039).
pub(crate) fn polls_waiting(waiting: usize) {
    gauge!(POLLS_WAITING).set(waiting as f64);
}
