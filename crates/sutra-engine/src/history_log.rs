//! The history log (issue 17, decision 0043): what this replica did, as structured events a
//! checker can read back — a step committed, a claim refused or lost, a caller answered, a lease
//! term begun, renewed or ended.
//!
//! Each event is one JSON object, the message of a `tracing` event at target [`TARGET`], level
//! INFO: one line on stderr per event with the server's formatter
//! (`… INFO sutra::history: {"seq":…,"ev":"commit",…}`). It is off unless the log filter names
//! the target (`SUTRA_LOG=warn,sutra::history=info`): the server's default filter turns it off
//! even where `SUTRA_LOG=info` would otherwise let it through. Disabled, an event costs the
//! callsite's interest check ([`tracing::enabled!`]); nothing is built or serialized.
//!
//! Every event carries `seq`, a number that grows by one per event in this process, taken as the
//! event is written: an event caused by another (an answer by the commit it reports) has the
//! larger number. It also carries `at` (wall clock, microseconds since the Unix epoch) and
//! `replica`, the process's replica id (unique per incarnation, decision 0008).
//!
//! The vocabulary (`ev`):
//! - `commit`: a step is durable — written once its group's `COMMIT` returned. `lane` (the
//!   claim's owner id), `tenant`, `instance`, `kind` (`start`, `resume`, `complete`, `migrate`,
//!   `poison`), `fence` (the instance's fence once this commit landed, as the committer computed
//!   it from the fence its claim read: 0 for a start), `claimed` (the fence the claim read; null
//!   for a start), `seq_first`/`seq_last` (the audit sequence of the history rows it wrote;
//!   null when it wrote none), `group` (a number per group in this process), `member` (its index
//!   in the group), `channel`/`event_id` (the message it consumed, if any), `park` (the park it
//!   answered), `took` (the delivery it took), `asked` (the parks it armed as tasks or timers),
//!   `disarmed` (other parks it disarmed), `outbox` (the keys of the outbox rows it wrote),
//!   `called` (the children it inserted, each `{child, park}`: the park of this instance
//!   waiting for it), `reported` (`{parent, park}`, when it ended a child and asked its parent's
//!   park to hear of it), `compensated` (the compensation-log entries whose handler completed
//!   in it), `status` (the instance's, once it landed).
//! - `claim_refused`: a claim met a holder. `lane`, `tenant`, `instance`.
//! - `claim_lost`: a commit's fenced update matched nothing. `lane`, `tenant`, `instance`,
//!   `claimed`.
//! - `answered`: intake answered a message's caller. `tenant`, `channel`, `event_id`,
//!   `instance` (null when buffered), `status`, `dedup`, `outcome` (`accepted`, `ended`,
//!   `still_running`).
//! - `lease`: a lease acquired or renewed. `role`, `epoch`, `phase` (`acquired`: a term begins;
//!   `renewed`), `deadline` (the term's local deadline, as wall clock microseconds).
//! - `lease_ended`: a term ended before its deadline. `role`, `epoch`, `why` (`lost`,
//!   `resigned`). A term also ends, silently, at its last deadline.
//! - `task_locked`: a task's lock answered to a worker. `tenant`, `task`, `attempt`, `lock` (a
//!   32-bit hash of the lock token, never the token), `until` (the lock's expiry, wall clock
//!   microseconds, as the database set it), `via` (`poll` or `take`).
//! - `task_completed`, `task_failed` (with `state`), `task_released`: a worker's completion,
//!   failure or release under lock `lock` answered as done. `task_extended`: its lock moved to
//!   `until`.
//! - `task_unheard`: a task locked for a waiting poll that went away before it was handed over
//!   (decision 0039), handed back under lock `lock`. No worker was answered that lock: one that
//!   was, recorded `task_locked`, is an anomaly.
//! - `sent`: an outbox row sent and marked sent. `instance`, `key` (its idempotency key).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};
use sutra_core::snapshot::ParkId;
use sutra_core::step::{HistoryEvent, HistoryKind};
use sutra_store::{Arm, ClaimKind, LockedTask, StepCommit};

/// The `tracing` target of every history event.
pub const TARGET: &str = "sutra::history";

/// Whether history events are recorded: the log filter enables [`TARGET`] at INFO.
#[inline]
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "sutra::history", tracing::Level::INFO)
}

/// Numbers the events of this process in the order they are written.
static SEQ: AtomicU64 = AtomicU64::new(0);

/// Numbers the groups of this process.
static GROUPS: AtomicU64 = AtomicU64::new(0);

/// A fresh group number, when recording.
pub(crate) fn next_group() -> u64 {
    if enabled() {
        GROUPS.fetch_add(1, Ordering::Relaxed) + 1
    } else {
        0
    }
}

/// Now, in microseconds since the epoch, by the system's clock rather than the engine's: the log
/// says when each line was written, for the history checker to put the lines of every replica on
/// one time line, and only `sutra serve` processes write it (on the system clock).
fn written_at() -> i64 {
    jiff::Timestamp::now().as_microsecond()
}

/// Writes `event` (an object), stamped with the process's next number, the time and `replica`.
fn emit(replica: &str, ev: &str, mut event: Value) {
    if let Value::Object(fields) = &mut event {
        fields.insert("ev".into(), ev.into());
        fields.insert("replica".into(), replica.into());
        fields.insert("at".into(), written_at().into());
        // Taken last, as the line is written: program order within the process.
        fields.insert(
            "seq".into(),
            (SEQ.fetch_add(1, Ordering::SeqCst) + 1).into(),
        );
    }
    tracing::info!(target: "sutra::history", "{event}");
}

/// What kind of step a commit was: what moved the instance.
pub(crate) const START: &str = "start";
/// A message, a delivery (a timer, a task's outcome taken by the dispatcher) or an
/// administrator's cancel: the ordinary claim and step.
pub(crate) const RESUME: &str = "resume";
/// A worker's completion that resumed the instance in its own transaction (decision 0024).
pub(crate) const COMPLETE: &str = "complete";
pub(crate) const MIGRATE: &str = "migrate";
/// An instance failed because its steps keep dying (SPEC §5.2): an administrative step.
pub(crate) const POISON: &str = "poison";

/// A committed step, as [`commit`] records it. Built only when recording.
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    pub lane: String,
    pub tenant: String,
    pub instance: String,
    /// [`START`], [`RESUME`], [`COMPLETE`], [`MIGRATE`] or [`POISON`].
    pub kind: &'static str,
    /// The fence the claim read; `None` for a start.
    pub claimed: Option<i64>,
    /// The fence once the commit landed.
    pub fence: i64,
    /// The audit sequence of the rows written: first and last.
    pub seqs: Option<(u64, u64)>,
    pub channel: Option<String>,
    pub event_id: Option<String>,
    /// The park whose event the step answered: a task's, a timer's, a wait's.
    pub park: Option<u64>,
    /// The delivery the step took (SPEC §5.6).
    pub took: Option<i64>,
    /// The parks it armed as tasks or timers: asked rows, each to be answered, disarmed or
    /// resolved by the instance's end.
    pub asked: Vec<u64>,
    /// The parks it disarmed besides the one it answered.
    pub disarmed: Vec<u64>,
    /// The idempotency keys of the outbox rows it wrote.
    pub outbox: Vec<String>,
    /// The children it inserted, each with the park of this instance that waits for it.
    pub called: Vec<(String, u64)>,
    /// The parent and park this step, ending a child, asked to hear of it.
    pub reported: Option<(String, u64)>,
    /// The compensation-log entries whose handler completed in this step.
    pub compensated: Vec<u64>,
    /// The instance's status once it landed.
    pub status: &'static str,
}

impl Commit {
    /// The record of `rows`, a step of kind `kind` committed by `lane` that answered `answered`.
    pub(crate) fn of(
        lane: &str,
        kind: &'static str,
        rows: &StepCommit,
        answered: Option<ParkId>,
    ) -> Commit {
        let claim = rows.claim.as_ref();
        let asked = rows.arms.iter().filter_map(|arm| match arm {
            Arm::Timer { park, .. } | Arm::Task { park, .. } => Some(park.0),
            Arm::Wait { .. } => None,
        });
        Commit {
            lane: lane.to_owned(),
            tenant: rows.snapshot.instance.tenant.clone(),
            instance: rows.snapshot.instance.id.clone(),
            kind,
            claimed: claim.map(|token| token.fence),
            fence: claim.map_or(0, |token| match token.kind {
                ClaimKind::Locked => token.fence + 1,
                ClaimKind::Durable => token.fence,
            }),
            seqs: Commit::seqs(&rows.history),
            channel: rows.inbox.as_ref().map(|inbox| inbox.channel.clone()),
            event_id: rows.inbox.as_ref().map(|inbox| inbox.event_id.clone()),
            park: answered.map(|park| park.0),
            took: rows.taken.map(|delivery| delivery.0),
            asked: asked.collect(),
            disarmed: (rows.disarms.iter())
                .filter(|disarm| Some(disarm.park) != answered)
                .map(|disarm| disarm.park.0)
                .collect(),
            outbox: (rows.outbox.iter())
                .map(|entry| entry.idempotency_key.clone())
                .collect(),
            called: (rows.children.iter())
                .map(|child| (child.snapshot.instance.id.clone(), child.park.0))
                .collect(),
            reported: (rows.report.as_ref()).map(|report| (report.parent.clone(), report.park.0)),
            compensated: Commit::compensated(&rows.history),
            status: rows.snapshot.status.as_str(),
        }
    }

    /// The entries of the `compensated` events among `history`.
    fn compensated(history: &[HistoryEvent]) -> Vec<u64> {
        (history.iter())
            .filter(|event| event.kind == HistoryKind::Compensated)
            .filter_map(|event| event.detail["entry"].as_u64())
            .collect()
    }

    /// The first and last audit sequence numbers among `history`.
    fn seqs(history: &[HistoryEvent]) -> Option<(u64, u64)> {
        let first = history.iter().map(|event| event.seq).min()?;
        let last = history.iter().map(|event| event.seq).max()?;
        Some((first, last))
    }
}

/// Whether a group's `COMMIT` is known to have landed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Landed {
    Yes,
    /// The `COMMIT` failed — or landed and its answer was lost with the connection: what
    /// happened next (an answer naming the instance, a later claim reading its fence) tells.
    Unknown,
}

/// `commit`, as member `member` of group `group`: durable, or perhaps durable.
pub(crate) fn commit(replica: &str, commit: &Commit, landed: Landed, group: u64, member: usize) {
    if !enabled() {
        return;
    }
    let ev = match landed {
        Landed::Yes => "commit",
        Landed::Unknown => "commit_unknown",
    };
    emit(
        replica,
        ev,
        json!({
            "lane": commit.lane,
            "tenant": commit.tenant,
            "instance": commit.instance,
            "kind": commit.kind,
            "claimed": commit.claimed,
            "fence": commit.fence,
            "seq_first": commit.seqs.map(|(first, _)| first),
            "seq_last": commit.seqs.map(|(_, last)| last),
            "group": group,
            "member": member,
            "channel": commit.channel,
            "event_id": commit.event_id,
            "park": commit.park,
            "took": commit.took,
            "asked": commit.asked,
            "disarmed": commit.disarmed,
            "outbox": commit.outbox,
            "called": (commit.called.iter())
                .map(|(child, park)| json!({"child": child, "park": park}))
                .collect::<Vec<_>>(),
            "reported": (commit.reported.as_ref())
                .map(|(parent, park)| json!({"parent": parent, "park": park})),
            "compensated": commit.compensated,
            "status": commit.status,
        }),
    );
}

/// A claim on `instance` by `lane` met a holder.
pub(crate) fn claim_refused(replica: &str, lane: &str, tenant: &str, instance: &str) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "claim_refused",
        json!({"lane": lane, "tenant": tenant, "instance": instance}),
    );
}

/// The fenced update of `lane`'s commit on `instance` matched nothing.
pub(crate) fn claim_lost(replica: &str, lane: &str, tenant: &str, instance: &str, claimed: i64) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "claim_lost",
        json!({"lane": lane, "tenant": tenant, "instance": instance, "claimed": claimed}),
    );
}

/// What intake told a message's caller.
pub(crate) struct Answered<'a> {
    pub tenant: &'a str,
    pub channel: &'a str,
    pub event_id: &'a str,
    pub instance: Option<&'a str>,
    pub status: &'a str,
    pub dedup: bool,
    pub outcome: &'static str,
}

pub(crate) fn answered(replica: &str, answered: &Answered<'_>) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "answered",
        json!({
            "tenant": answered.tenant,
            "channel": answered.channel,
            "event_id": answered.event_id,
            "instance": answered.instance,
            "status": answered.status,
            "dedup": answered.dedup,
            "outcome": answered.outcome,
        }),
    );
}

/// A lease on `role` acquired (a term begins) or renewed, the term's local deadline `left` from
/// now.
pub(crate) fn lease(replica: &str, role: &str, epoch: i64, acquired: bool, left: Duration) {
    if !enabled() {
        return;
    }
    let deadline = written_at() + left.as_micros() as i64;
    emit(
        replica,
        "lease",
        json!({
            "role": role,
            "epoch": epoch,
            "phase": if acquired { "acquired" } else { "renewed" },
            "deadline": deadline,
        }),
    );
}

/// A term on `role` ended before its deadline: `why` is `lost` or `resigned`.
pub(crate) fn lease_ended(replica: &str, role: &str, epoch: i64, why: &str) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "lease_ended",
        json!({"role": role, "epoch": epoch, "why": why}),
    );
}

/// How a worker came to hold a task's lock: its poll, or its completion's take (decision 0038).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Via {
    Poll,
    Take,
}

/// A task locked for a worker and answered to it: one lock term, from now until `until` unless
/// completed, failed, released or extended first.
pub(crate) fn task_locked(replica: &str, tenant: &str, task: &LockedTask, via: Via) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "task_locked",
        json!({
            "tenant": tenant,
            "task": task.id,
            "attempt": task.attempt,
            "lock": lock_print(&task.lock_token),
            "until": task.lock_expires_at.as_microsecond(),
            "via": match via { Via::Poll => "poll", Via::Take => "take" },
        }),
    );
}

/// What a worker holding a task's lock was answered as having done with it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum TaskOutcome {
    /// Its completion is durable: resumed in place, or asked as a delivery.
    Completed,
    /// Its failed attempt is recorded; the task is left as `state` says.
    Failed(&'static str),
    /// Handed back, available again.
    Released,
}

/// A worker's completion, failure or release of `task` under the lock `lock_token` was answered
/// as done.
pub(crate) fn task_answered(
    replica: &str,
    tenant: &str,
    task: &str,
    lock_token: &str,
    outcome: TaskOutcome,
) {
    if !enabled() {
        return;
    }
    let (ev, state) = match outcome {
        TaskOutcome::Completed => ("task_completed", None),
        TaskOutcome::Failed(state) => ("task_failed", Some(state)),
        TaskOutcome::Released => ("task_released", None),
    };
    emit(
        replica,
        ev,
        json!({"tenant": tenant, "task": task, "lock": lock_print(lock_token), "state": state}),
    );
}

/// A task locked for a waiting poll that went away was handed back under `lock_token`: the lock
/// was never answered to a worker.
pub(crate) fn task_unheard(replica: &str, tenant: &str, task: &str, lock_token: &str) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "task_unheard",
        json!({"tenant": tenant, "task": task, "lock": lock_print(lock_token)}),
    );
}

/// A held lock moved on to `until`.
pub(crate) fn task_extended(
    replica: &str,
    tenant: &str,
    task: &str,
    lock_token: &str,
    until: jiff::Timestamp,
) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "task_extended",
        json!({
            "tenant": tenant,
            "task": task,
            "lock": lock_print(lock_token),
            "until": until.as_microsecond(),
        }),
    );
}

/// An outbox row, by its idempotency key, was sent and marked sent.
pub(crate) fn sent(replica: &str, instance: &str, key: &str) {
    if !enabled() {
        return;
    }
    emit(replica, "sent", json!({"instance": instance, "key": key}));
}

/// Tells one lock from another without writing the token, which completes the task: a hash of
/// it, 32 bits of which say nothing usable about it.
fn lock_print(lock_token: &str) -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    lock_token.hash(&mut hasher);
    format!("{:08x}", hasher.finish() as u32)
}
