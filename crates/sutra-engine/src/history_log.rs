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
//!   claim's owner id), `tenant`, `instance`, `kind` (`start`, `resume`, `migrate`, `complete`,
//!   `admin`), `fence` (the instance's fence once this commit landed, as the committer computed
//!   it from the fence its claim read: 0 for a start), `claimed` (the fence the claim read; null
//!   for a start), `seq_first`/`seq_last` (the audit sequence of the history rows it wrote;
//!   null when it wrote none), `group` (a number per group in this process), `member` (its index
//!   in the group), `channel`/`event_id` (the message it consumed, if any).
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

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use sutra_core::step::HistoryEvent;

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

/// Writes `event` (an object), stamped with the process's next number, the time and `replica`.
fn emit(replica: &str, ev: &str, mut event: Value) {
    if let Value::Object(fields) = &mut event {
        fields.insert("ev".into(), ev.into());
        fields.insert("replica".into(), replica.into());
        fields.insert("at".into(), jiff::Timestamp::now().as_microsecond().into());
        // Taken last, as the line is written: program order within the process.
        fields.insert(
            "seq".into(),
            (SEQ.fetch_add(1, Ordering::SeqCst) + 1).into(),
        );
    }
    tracing::info!(target: "sutra::history", "{event}");
}

/// A committed step, as [`commit`] records it. Built only when recording.
#[derive(Debug, Clone)]
pub(crate) struct Commit {
    pub lane: String,
    pub tenant: String,
    pub instance: String,
    pub kind: &'static str,
    /// The fence the claim read; `None` for a start.
    pub claimed: Option<i64>,
    /// The fence once the commit landed.
    pub fence: i64,
    /// The audit sequence of the rows written: first and last.
    pub seqs: Option<(u64, u64)>,
    pub channel: Option<String>,
    pub event_id: Option<String>,
}

impl Commit {
    /// The first and last audit sequence numbers among `history`.
    pub(crate) fn seqs(history: &[HistoryEvent]) -> Option<(u64, u64)> {
        let first = history.iter().map(|event| event.seq).min()?;
        let last = history.iter().map(|event| event.seq).max()?;
        Some((first, last))
    }
}

/// `commit` is durable, as member `member` of group `group`.
pub(crate) fn commit(replica: &str, commit: &Commit, group: u64, member: usize) {
    if !enabled() {
        return;
    }
    emit(
        replica,
        "commit",
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

/// A lease on `role` acquired (a term begins) or renewed, the term's local deadline `until`.
pub(crate) fn lease(
    replica: &str,
    role: &str,
    epoch: i64,
    acquired: bool,
    until: tokio::time::Instant,
) {
    if !enabled() {
        return;
    }
    let left = until.saturating_duration_since(tokio::time::Instant::now());
    let deadline = jiff::Timestamp::now().as_microsecond() + left.as_micros() as i64;
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
