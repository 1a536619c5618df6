//! The store conformance suite: the guarantees of SPEC §5 that every [`Store`] must keep, written
//! once against the trait so that every backend is held to the same contract, and a backend
//! cannot quietly weaken one (the style of River's `riverdrivertest`).
//!
//! Each invariant is a `pub async fn` named after it, taking a fresh, empty store;
//! [`conformance_tests!`](crate::conformance_tests) expands to one `#[tokio::test]` per invariant
//! so that each shows up by name in the test report.
//!
//! Nothing here depends on the machine being fast: a claim meant to lapse has a 1 ms timeout and
//! the test sleeps well past it; a claim meant to stay live has a one-hour timeout. Test times
//! are whole microseconds, the resolution the store keeps.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot, Status, TokenId};
use sutra_core::step::{HistoryEvent, HistoryKind, Message};

mod leases;
mod outbox;
mod purge;
mod tasks;

pub use leases::*;
pub use outbox::*;
pub use purge::*;
pub use tasks::*;

use crate::{
    Arm, BufferedMessage, Claimed, Delivery, DeliveryId, DeliveryKind, DeploymentRecord,
    DeploymentStatus, Error, InboxAnswer, InboxEntry, InstanceFilter, InstanceKey, InstanceRecord,
    NewDelivery, OutboxEntry, OutboxRecord, Owner, Result, StepCommit, Store, SweepOutcome,
    TaskRecord, TaskState, WaitTarget,
};

/// Expands to one `#[tokio::test]` per invariant of the suite, each against a fresh store made by
/// `$fresh`: an expression, evaluated once per test, giving a future whose output dereferences to
/// the store (a `Box`, or a fixture that also owns the database's directory and deletes it on
/// drop). The calling crate needs `tokio` with `macros` and `rt` among its dev-dependencies.
#[macro_export]
macro_rules! conformance_tests {
    ($fresh:expr) => {
        $crate::conformance_tests!(@each $fresh;
            ping_succeeds_on_a_fresh_store,
            claim_refuses_instead_of_waiting,
            claim_increments_the_fence_every_time,
            claim_is_reentrant_for_the_same_owner,
            claim_of_a_missing_instance_is_not_found,
            exactly_one_of_concurrent_claimants_wins,
            stale_claim_is_taken_after_the_timeout,
            commit_and_release_are_one_fact,
            lapsed_holder_cannot_commit,
            fence_refuses_a_stale_token_of_the_same_owner,
            release_gives_the_claim_back,
            release_after_a_lost_claim_changes_nothing,
            sweep_clears_claims_by_age_and_never_parses_owners,
            sweep_leaves_live_claims_alone,
            sweep_counts_consecutive_recoveries_and_reports_poison,
            start_is_owned_by_whoever_inserted_the_inbox_row,
            concurrent_starts_of_one_message_have_one_winner,
            correlation_alias_is_unique,
            disarm_resolves_waits_timers_tasks_and_pending_deliveries,
            asked_delivery_is_durable_and_taken_in_the_commit,
            every_delivery_kind_reads_back_as_asked,
            deferred_delivery_is_not_due_until_its_time,
            due_deliveries_are_oldest_first,
            discard_deletes,
            next_due_is_the_earliest_pending_delivery,
            timer_arm_is_a_future_delivery,
            buffered_message_is_matched_in_the_parks_own_transaction,
            buffer_relays_to_a_wait_armed_since_the_intake_looked,
            history_sequence_cannot_repeat,
            tenants_never_see_each_others_rows,
            instances_page_by_keyset,
            deploy_makes_version_n_plus_one_active_and_the_previous_draining,
            a_row_is_claimed_by_one_sender_at_a_time,
            claims_take_the_oldest_due_rows_first,
            a_stale_claim_is_cleared_and_retried,
            sent_rows_are_never_claimed_again,
            failed_sends_back_off,
            past_max_attempts_a_row_is_poisoned_and_stays_visible,
            the_idempotency_key_is_unique_and_stable,
            tenants_never_see_each_others_outbox,
            a_task_is_locked_by_one_poller_at_a_time,
            a_poll_takes_the_oldest_tasks_of_its_topics_with_their_own_lock,
            an_expired_lock_makes_the_task_available_again,
            a_wrong_or_expired_lock_token_is_refused,
            completing_twice_is_refused,
            completion_is_recorded_with_the_task_update,
            a_business_error_is_delivered_at_once,
            retries_back_off_then_exhaust,
            a_lock_that_expires_counts_as_an_attempt,
            extend_moves_the_lock_deadline,
            a_disarmed_task_cannot_be_completed,
            next_task_at_is_when_a_poll_could_next_take_one,
            tasks_page_by_keyset_and_filter,
            tenants_never_see_each_others_tasks,
            one_holder_at_a_time,
            an_expired_lease_is_taken_and_its_epoch_grows,
            the_holder_renews_without_changing_the_epoch,
            a_released_lease_is_free_at_once,
            the_purger_removes_old_terminal_instances_and_never_failed_ones,
            the_deployment_revision_grows_with_every_deploy,
        );
    };
    (@each $fresh:expr; $($invariant:ident),+ $(,)?) => {
        $(
            #[tokio::test]
            async fn $invariant() {
                let store = $fresh.await;
                $crate::conformance::$invariant(&*store).await;
            }
        )+
    };
}

const TENANT: &str = "acme";
const OTHER_TENANT: &str = "globex";
/// The channel instances start on.
const STARTS: &str = "transfer-requests";
/// The channel instances wait on.
const REPLIES: &str = "bank-replies";
const LANE_A: &str = "replica-a/lane-0";
const LANE_B: &str = "replica-b/lane-0";
/// A claim timeout no test outlives: the claim stays live.
const HOUR: SignedDuration = SignedDuration::from_hours(1);
/// A claim timeout every claim outlives after [`lapse`].
const LAPSE: SignedDuration = SignedDuration::from_millis(1);
/// The parks [`full_step`] arms.
const WAIT_PARK: ParkId = ParkId(1);
const TIMER_PARK: ParkId = ParkId(2);
const TASK_PARK: ParkId = ParkId(3);

/// Sleeps well past [`LAPSE`].
async fn lapse() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Now, to the microsecond, so that what the store reads back compares equal.
fn now() -> Timestamp {
    Timestamp::from_microsecond(Timestamp::now().as_microsecond()).expect("now is in range")
}

fn owner(name: &str) -> Owner {
    Owner(name.to_owned())
}

/// A UUIDv7-shaped id; ids sort by `n`, as UUIDv7 ids sort by creation.
fn id(n: u32) -> String {
    format!("0190c0de-0000-7000-8000-{n:012}")
}

fn snapshot(tenant: &str, id: &str, status: Status) -> Snapshot {
    let mut snapshot = Snapshot::new(InstanceInfo {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        deployment: "payments".to_owned(),
        version: 1,
        flow: "money-transfer".to_owned(),
    });
    snapshot.status = status;
    snapshot
}

fn event(seq: u64, kind: HistoryKind) -> HistoryEvent {
    HistoryEvent {
        seq,
        at: now(),
        kind,
        node: Some("debit".to_owned()),
        token: Some(TokenId(1)),
        detail: json!({ "seq": seq }),
    }
}

fn message(event_id: &str) -> Message {
    Message {
        id: event_id.to_owned(),
        kind: "bank.reply".to_owned(),
        source: "/bank".to_owned(),
        subject: Some("t-1".to_owned()),
        time: None,
        data: json!({ "transferId": "t-1", "approved": true }),
    }
}

fn answer(id: &str, status: Status) -> InboxAnswer {
    InboxAnswer {
        instance: Some(id.to_owned()),
        status: status.as_str().to_owned(),
    }
}

/// The step that starts the instance of `snapshot` on message `event_id`.
fn start(mut snapshot: Snapshot, event_id: &str) -> StepCommit {
    snapshot.audit_seq = 1;
    let inbox = InboxEntry {
        channel: STARTS.to_owned(),
        event_id: event_id.to_owned(),
        answer: answer(&snapshot.instance.id, snapshot.status),
    };
    StepCommit {
        claim: None,
        history: vec![event(1, HistoryKind::Started)],
        arms: Vec::new(),
        disarms: Vec::new(),
        outbox: Vec::new(),
        taken: None,
        inbox: Some(inbox),
        snapshot,
    }
}

/// Starts a suspended instance; returns its snapshot.
async fn started<S: Store>(store: &S, tenant: &str, id: &str) -> Snapshot {
    let commit = start(
        snapshot(tenant, id, Status::Suspended),
        &format!("start-{id}"),
    );
    store.commit(&commit).await.expect("a start commits");
    commit.snapshot
}

async fn claim_as<S: Store>(
    store: &S,
    id: &str,
    who: &str,
    timeout: SignedDuration,
) -> Result<Claimed> {
    store.claim(TENANT, id, &owner(who), timeout).await
}

/// Claims an instance whose claim is free.
async fn claimed<S: Store>(store: &S, id: &str, who: &str) -> Claimed {
    claim_as(store, id, who, HOUR)
        .await
        .expect("the claim is free")
}

/// Lane A claims, its claim lapses, and lane B takes the instance over: returns both claims.
async fn taken_over<S: Store>(store: &S, id: &str) -> (Claimed, Claimed) {
    let lapsed = claimed(store, id, LANE_A).await;
    lapse().await;
    let taker = claim_as(store, id, LANE_B, LAPSE)
        .await
        .expect("a lapsed claim is taken");
    (lapsed, taker)
}

/// The smallest step: the claimed snapshot written back, nothing else.
fn step(claimed: &Claimed) -> StepCommit {
    StepCommit {
        claim: Some(claimed.token.clone()),
        snapshot: claimed.snapshot.clone(),
        history: Vec::new(),
        arms: Vec::new(),
        disarms: Vec::new(),
        outbox: Vec::new(),
        taken: None,
        inbox: None,
    }
}

/// A step arming `arms` and nothing else.
fn arming(claimed: &Claimed, arms: Vec<Arm>) -> StepCommit {
    StepCommit {
        arms,
        ..step(claimed)
    }
}

/// A step that writes a row of every kind: a new variable, the next history event, a wait, a
/// timer and a task, an outbox row, the inbox row of the message it consumed, and takes `taken`.
fn full_step(claimed: &Claimed, taken: Option<DeliveryId>) -> StepCommit {
    let mut snapshot = claimed.snapshot.clone();
    snapshot.audit_seq += 1;
    snapshot.vars.insert("approved".to_owned(), json!(true));
    let id = snapshot.instance.id.clone();
    StepCommit {
        history: vec![event(snapshot.audit_seq, HistoryKind::MessageReceived)],
        arms: vec![
            wait(WAIT_PARK, &id),
            Arm::Timer {
                park: TIMER_PARK,
                due: now() + HOUR,
            },
            task(TASK_PARK),
        ],
        outbox: vec![OutboxEntry {
            channel: "ledger".to_owned(),
            payload: json!({ "transfer": "t-1", "status": "ok" }),
            message_key: Some("t-1".to_owned()),
            idempotency_key: format!("{id}:{}:notify", snapshot.audit_seq),
        }],
        taken,
        inbox: Some(InboxEntry {
            channel: REPLIES.to_owned(),
            event_id: format!("reply-{id}"),
            answer: answer(&id, Status::Suspended),
        }),
        snapshot,
        ..step(claimed)
    }
}

fn wait(park: ParkId, key: &str) -> Arm {
    Arm::Wait {
        park,
        channel: REPLIES.to_owned(),
        key: key.to_owned(),
    }
}

fn task(park: ParkId) -> Arm {
    Arm::Task {
        park,
        topic: "debit-account".to_owned(),
        input: json!({ "account": "a-1", "amount": 10 }),
        retries: 3,
        backoff: SignedDuration::from_secs(5),
        lock: SignedDuration::from_mins(1),
    }
}

fn relay(id: &str, park: ParkId, due_at: Timestamp) -> NewDelivery {
    NewDelivery {
        tenant: TENANT.to_owned(),
        instance: id.to_owned(),
        park,
        kind: DeliveryKind::Relay {
            message: message(&format!("relay-{park}")),
        },
        due_at,
    }
}

/// The delivery `asked` should read back as.
fn delivered(id: DeliveryId, asked: NewDelivery, attempts: u32) -> Delivery {
    Delivery {
        id,
        tenant: asked.tenant,
        instance: asked.instance,
        park: asked.park,
        kind: asked.kind,
        due_at: asked.due_at,
        attempts,
    }
}

fn parks(deliveries: &[Delivery]) -> Vec<ParkId> {
    deliveries.iter().map(|delivery| delivery.park).collect()
}

/// The `(channel, key, park)` of every wait a step arms.
fn armed_waits(commit: &StepCommit) -> Vec<(&str, &str, ParkId)> {
    commit
        .arms
        .iter()
        .filter_map(|arm| match arm {
            Arm::Wait { park, channel, key } => Some((channel.as_str(), key.as_str(), *park)),
            _ => None,
        })
        .collect()
}

/// Everything a step can have written, as the trait's reads show it.
#[derive(Debug, PartialEq)]
struct Footprint {
    instance: Option<InstanceRecord>,
    history: Vec<HistoryEvent>,
    /// What each of the step's waits finds, in [`armed_waits`] order.
    waits: Vec<Option<WaitTarget>>,
    tasks: Vec<TaskRecord>,
    outbox: Vec<OutboxRecord>,
    inbox: Option<InboxAnswer>,
    taken: Option<Delivery>,
    next_due: Option<Timestamp>,
}

async fn footprint<S: Store>(store: &S, commit: &StepCommit) -> Footprint {
    let InstanceInfo { tenant, id, .. } = &commit.snapshot.instance;
    let mut waits = Vec::new();
    for (channel, key, _) in armed_waits(commit) {
        waits.push(store.find_wait(tenant, channel, key).await.unwrap());
    }
    let inbox = match &commit.inbox {
        Some(entry) => store
            .inbox_answer(tenant, &entry.channel, &entry.event_id)
            .await
            .unwrap(),
        None => None,
    };
    let taken = match commit.taken {
        Some(delivery) => store.delivery(delivery).await.unwrap(),
        None => None,
    };
    Footprint {
        instance: store.instance(tenant, id).await.unwrap(),
        history: store.history(tenant, id).await.unwrap(),
        waits,
        tasks: store.tasks(tenant, id).await.unwrap(),
        outbox: store.outbox(tenant, id).await.unwrap(),
        inbox,
        taken,
        next_due: store.next_due().await.unwrap(),
    }
}

/// Attempts `commit`, which must fail, and checks that nothing of it is visible; returns why it
/// failed.
async fn refused_commit<S: Store>(store: &S, commit: &StepCommit) -> Error {
    let before = footprint(store, commit).await;
    let error = store
        .commit(commit)
        .await
        .expect_err("the commit must fail");
    assert_eq!(
        footprint(store, commit).await,
        before,
        "a failed commit must leave no trace"
    );
    error
}

/// Checks that every row of `commit` is visible and the instance is unowned again.
async fn assert_committed<S: Store>(store: &S, commit: &StepCommit) {
    let seen = footprint(store, commit).await;
    let record = seen.instance.expect("the instance exists");
    assert_eq!(
        record.owner, None,
        "committed and unowned again are one fact"
    );
    assert_eq!(record.snapshot, commit.snapshot);
    assert!(
        commit
            .history
            .iter()
            .all(|event| seen.history.contains(event))
    );
    let instance = &commit.snapshot.instance.id;
    let waits: Vec<_> = armed_waits(commit)
        .into_iter()
        .map(|(_, _, park)| {
            Some(WaitTarget {
                instance: instance.clone(),
                park,
            })
        })
        .collect();
    assert_eq!(seen.waits, waits);
    let tasks: Vec<_> = commit
        .arms
        .iter()
        .filter_map(|arm| match arm {
            Arm::Task { park, .. } => Some((*park, TaskState::Available)),
            _ => None,
        })
        .collect();
    let seen_tasks: Vec<_> = seen
        .tasks
        .iter()
        .map(|task| (task.park, task.state))
        .collect();
    assert_eq!(seen_tasks, tasks);
    let outbox: Vec<_> = seen.outbox.iter().map(|record| &record.entry).collect();
    assert_eq!(outbox, commit.outbox.iter().collect::<Vec<_>>());
    assert_eq!(
        seen.inbox,
        commit.inbox.as_ref().map(|entry| entry.answer.clone())
    );
    assert_eq!(seen.taken, None, "the taken delivery is consumed");
}

async fn owner_of<S: Store>(store: &S, id: &str) -> Option<String> {
    record(store, id).await.owner
}

async fn record<S: Store>(store: &S, id: &str) -> InstanceRecord {
    store
        .instance(TENANT, id)
        .await
        .unwrap()
        .expect("the instance exists")
}

pub async fn ping_succeeds_on_a_fresh_store<S: Store>(store: &S) {
    store.ping().await.unwrap();
}

pub async fn claim_refuses_instead_of_waiting<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    claimed(store, &id, LANE_A).await;
    let before = store.instance(TENANT, &id).await.unwrap();

    // Lane A never lets go: a store that waited for it would hang here.
    let refusal = tokio::time::timeout(Duration::from_secs(30), claim_as(store, &id, LANE_B, HOUR))
        .await
        .expect("a held claim must be refused, not waited for");

    assert_eq!(refusal, Err(Error::ClaimHeld));
    assert_eq!(
        store.instance(TENANT, &id).await.unwrap(),
        before,
        "a refusal writes nothing"
    );
    assert_eq!(owner_of(store, &id).await.as_deref(), Some(LANE_A));
}

pub async fn claim_increments_the_fence_every_time<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;

    let first = claimed(store, &id, LANE_A).await;
    let reentered = claimed(store, &id, LANE_A).await;
    store.release(TENANT, &id, &reentered.token).await.unwrap();
    let after_release = claimed(store, &id, LANE_B).await;
    store.commit(&step(&after_release)).await.unwrap();
    let after_commit = claimed(store, &id, LANE_A).await;

    let fences: Vec<i64> = [first, reentered, after_release, after_commit.clone()]
        .iter()
        .map(|claimed| claimed.token.fence)
        .collect();
    assert!(
        fences.windows(2).all(|pair| pair[0] < pair[1]),
        "fences {fences:?}"
    );
    assert_eq!(record(store, &id).await.fence, after_commit.token.fence);
}

pub async fn claim_is_reentrant_for_the_same_owner<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let first = claimed(store, &id, LANE_A).await;

    // The claim is live (one hour): only re-entrancy lets the same lane in again.
    let again = claimed(store, &id, LANE_A).await;

    assert_eq!(again.token.owner, first.token.owner);
    assert_eq!(again.snapshot, first.snapshot);
    store.commit(&step(&again)).await.unwrap();
    assert_eq!(owner_of(store, &id).await, None);
}

pub async fn claim_of_a_missing_instance_is_not_found<S: Store>(store: &S) {
    let outcome = claim_as(store, &id(1), LANE_A, HOUR).await;
    assert!(
        matches!(outcome, Err(Error::InstanceNotFound(_))),
        "{outcome:?}"
    );
}

pub async fn exactly_one_of_concurrent_claimants_wins<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;

    let (a, b, c, d) = tokio::join!(
        claim_as(store, &id, "replica-a/lane-0", HOUR),
        claim_as(store, &id, "replica-a/lane-1", HOUR),
        claim_as(store, &id, "replica-b/lane-0", HOUR),
        claim_as(store, &id, "replica-b/admin", HOUR),
    );

    let outcomes = [a, b, c, d];
    let winners: Vec<&Claimed> = outcomes
        .iter()
        .filter_map(|outcome| outcome.as_ref().ok())
        .collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let refusals = outcomes
        .iter()
        .filter(|outcome| **outcome == Err(Error::ClaimHeld))
        .count();
    assert_eq!(refusals, 3, "{outcomes:?}");
    assert_eq!(
        owner_of(store, &id).await,
        Some(winners[0].token.owner.0.clone())
    );
}

pub async fn stale_claim_is_taken_after_the_timeout<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;

    let (lapsed, taker) = taken_over(store, &id).await;

    assert!(taker.token.fence > lapsed.token.fence);
    let record = record(store, &id).await;
    assert_eq!(record.owner.as_deref(), Some(LANE_B));
    assert_eq!(record.fence, taker.token.fence);
}

pub async fn commit_and_release_are_one_fact<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let asked = store.ask(&relay(&id, ParkId(9), now())).await.unwrap();
    let claim = claimed(store, &id, LANE_A).await;
    let commit = full_step(&claim, Some(asked));

    let before = footprint(store, &commit).await;
    assert_eq!(
        before.instance.as_ref().and_then(|r| r.owner.as_deref()),
        Some(LANE_A)
    );
    assert_eq!(before.history.len(), 1);
    assert!(before.waits.iter().all(Option::is_none));
    assert!(before.tasks.is_empty() && before.outbox.is_empty() && before.inbox.is_none());
    assert!(before.taken.is_some());

    store.commit(&commit).await.unwrap();

    assert_committed(store, &commit).await;
}

pub async fn lapsed_holder_cannot_commit<S: Store>(store: &S) {
    let id = id(1);
    let before = started(store, TENANT, &id).await;
    let asked = store.ask(&relay(&id, ParkId(9), now())).await.unwrap();
    let (lapsed, taker) = taken_over(store, &id).await;

    let error = refused_commit(store, &full_step(&lapsed, Some(asked))).await;

    assert_eq!(error, Error::ClaimLost);
    assert_eq!(record(store, &id).await.snapshot, before);
    let commit = full_step(&taker, Some(asked));
    store.commit(&commit).await.unwrap();
    assert_committed(store, &commit).await;
}

pub async fn fence_refuses_a_stale_token_of_the_same_owner<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let lapsed = claimed(store, &id, LANE_A).await;
    lapse().await;
    store.sweep(LAPSE, 5).await.unwrap();
    // The owner matches again; only the fence tells the two claims apart.
    let current = claimed(store, &id, LANE_A).await;

    let error = refused_commit(store, &full_step(&lapsed, None)).await;

    assert_eq!(error, Error::ClaimLost);
    store.commit(&full_step(&current, None)).await.unwrap();
}

pub async fn release_gives_the_claim_back<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let claim = claimed(store, &id, LANE_A).await;

    store.release(TENANT, &id, &claim.token).await.unwrap();

    assert_eq!(owner_of(store, &id).await, None);
    assert!(
        claim_as(store, &id, LANE_B, HOUR).await.is_ok(),
        "a released claim is free"
    );
}

pub async fn release_after_a_lost_claim_changes_nothing<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let (lapsed, taker) = taken_over(store, &id).await;
    let before = record(store, &id).await;

    store.release(TENANT, &id, &lapsed.token).await.unwrap();

    assert_eq!(
        record(store, &id).await,
        before,
        "B's claim survives A's late release"
    );
    store.commit(&step(&taker)).await.unwrap();
}

pub async fn sweep_clears_claims_by_age_and_never_parses_owners<S: Store>(store: &S) {
    let owners = [
        "replica-a/lane-0",
        "replica-a/admin",
        "a/b/c/lane-9/",
        "réplica-ü/通道-1",
        "",
        " ",
        "NULL",
        "%",
        "'; DELETE FROM instances; --",
    ];
    let ids: Vec<String> = (1..).map(id).take(owners.len()).collect();
    for (id, who) in ids.iter().zip(owners) {
        started(store, TENANT, id).await;
        claim_as(store, id, who, HOUR).await.unwrap();
    }
    lapse().await;

    let outcome = store.sweep(LAPSE, 5).await.unwrap();

    assert_eq!(
        outcome,
        SweepOutcome {
            cleared: owners.len() as u64,
            poisoned: Vec::new()
        }
    );
    for id in &ids {
        assert_eq!(owner_of(store, id).await, None);
        assert!(
            claim_as(store, id, LANE_B, HOUR).await.is_ok(),
            "a swept claim is free"
        );
    }
}

pub async fn sweep_leaves_live_claims_alone<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let holder = claimed(store, &id, LANE_A).await;
    let before = record(store, &id).await;

    let outcome = store.sweep(HOUR, 5).await.unwrap();

    assert_eq!(outcome, SweepOutcome::default());
    assert_eq!(record(store, &id).await, before);
    store.commit(&step(&holder)).await.unwrap();
}

pub async fn sweep_counts_consecutive_recoveries_and_reports_poison<S: Store>(store: &S) {
    const MAX_RECOVERIES: u32 = 3;
    let id = id(1);
    started(store, TENANT, &id).await;
    let key = InstanceKey {
        tenant: TENANT.to_owned(),
        id: id.clone(),
    };
    let die_and_sweep = || async {
        claimed(store, &id, LANE_A).await;
        lapse().await;
        store.sweep(LAPSE, MAX_RECOVERIES).await.unwrap()
    };

    for recovery in 1..=MAX_RECOVERIES {
        let outcome = die_and_sweep().await;
        assert_eq!(outcome.cleared, 1);
        assert_eq!(record(store, &id).await.recoveries, recovery);
        let poisoned = recovery == MAX_RECOVERIES;
        assert_eq!(
            outcome.poisoned,
            if poisoned {
                vec![key.clone()]
            } else {
                Vec::new()
            }
        );
    }

    let survivor = claimed(store, &id, LANE_A).await;
    store.commit(&step(&survivor)).await.unwrap();
    assert_eq!(
        record(store, &id).await.recoveries,
        0,
        "a commit ends the run of recoveries"
    );
    assert!(die_and_sweep().await.poisoned.is_empty());
    assert_eq!(record(store, &id).await.recoveries, 1);
}

pub async fn start_is_owned_by_whoever_inserted_the_inbox_row<S: Store>(store: &S) {
    let first = start(snapshot(TENANT, &id(1), Status::Suspended), "evt-1");
    let racer = start(snapshot(TENANT, &id(2), Status::Suspended), "evt-1");
    store.commit(&first).await.unwrap();

    let error = refused_commit(store, &racer).await;

    let first_answer = first.inbox.expect("a start consumes a message").answer;
    assert_eq!(error, Error::Duplicate(first_answer));
    assert_eq!(store.instance(TENANT, &id(2)).await.unwrap(), None);
}

pub async fn concurrent_starts_of_one_message_have_one_winner<S: Store>(store: &S) {
    let starts = [1, 2].map(|n| start(snapshot(TENANT, &id(n), Status::Suspended), "evt-1"));

    let (a, b) = tokio::join!(store.commit(&starts[0]), store.commit(&starts[1]));

    let (winner, loser) = match (a, b) {
        (Ok(_), Err(error)) => (&starts[0], error),
        (Err(error), Ok(_)) => (&starts[1], error),
        outcomes => panic!("exactly one start must win: {outcomes:?}"),
    };
    let answer = winner
        .inbox
        .as_ref()
        .expect("a start consumes a message")
        .answer
        .clone();
    assert_eq!(loser, Error::Duplicate(answer));
    let instances = store
        .instances(TENANT, &InstanceFilter::default())
        .await
        .unwrap();
    assert_eq!(instances.len(), 1);
}

pub async fn correlation_alias_is_unique<S: Store>(store: &S) {
    let (waiter, rival) = (id(1), id(2));
    started(store, TENANT, &waiter).await;
    started(store, TENANT, &rival).await;
    let holder = claimed(store, &waiter, LANE_A).await;
    store
        .commit(&arming(&holder, vec![wait(ParkId(1), "t-1")]))
        .await
        .unwrap();
    let claim = claimed(store, &rival, LANE_A).await;
    // Every other row of the step is written before the clashing alias, so the rollback shows.
    let mut commit = full_step(&claim, None);
    commit.arms.push(wait(ParkId(7), "t-1"));

    let error = refused_commit(store, &commit).await;

    let taken = Error::AliasTaken {
        channel: REPLIES.to_owned(),
        key: "t-1".to_owned(),
    };
    assert_eq!(error, taken);
    let target = WaitTarget {
        instance: waiter,
        park: ParkId(1),
    };
    assert_eq!(
        store.find_wait(TENANT, REPLIES, "t-1").await.unwrap(),
        Some(target)
    );
}

pub async fn disarm_resolves_waits_timers_tasks_and_pending_deliveries<S: Store>(store: &S) {
    let (disarmed, bystander) = (id(1), id(2));
    let past = now() - SignedDuration::from_secs(1);
    // Parks 1 and 3 are `receive`s with a timeout (a wait and a timer), park 2 a task.
    let arms = |key: &str| {
        vec![
            wait(ParkId(1), &format!("{key}-1")),
            Arm::Timer {
                park: ParkId(1),
                due: past,
            },
            task(ParkId(2)),
            wait(ParkId(3), &format!("{key}-3")),
            Arm::Timer {
                park: ParkId(3),
                due: past,
            },
        ]
    };
    let mut asked = Vec::new();
    for id in [&disarmed, &bystander] {
        started(store, TENANT, id).await;
        let claim = claimed(store, id, LANE_A).await;
        store.commit(&arming(&claim, arms(id))).await.unwrap();
        for park in [ParkId(1), ParkId(3)] {
            asked.push(store.ask(&relay(id, park, past)).await.unwrap());
        }
    }
    let claim = claimed(store, &disarmed, LANE_A).await;

    let disarm = StepCommit {
        disarms: vec![ParkId(1), ParkId(2)],
        ..step(&claim)
    };
    store.commit(&disarm).await.unwrap();

    let find = |key: String| async move { store.find_wait(TENANT, REPLIES, &key).await.unwrap() };
    assert_eq!(find(format!("{disarmed}-1")).await, None);
    let kept = Some(WaitTarget {
        instance: disarmed.clone(),
        park: ParkId(3),
    });
    assert_eq!(find(format!("{disarmed}-3")).await, kept);
    assert!(
        find(format!("{bystander}-1")).await.is_some(),
        "another instance's park 1 stays"
    );
    assert_eq!(store.delivery(asked[0]).await.unwrap(), None);
    assert!(store.delivery(asked[1]).await.unwrap().is_some());
    let due = store.due_deliveries(100).await.unwrap();
    let due_of = |id: &String| {
        let parks = due
            .iter()
            .filter(|delivery| &delivery.instance == id)
            .map(|delivery| delivery.park);
        parks.collect::<Vec<_>>()
    };
    assert_eq!(
        due_of(&disarmed),
        [ParkId(3), ParkId(3)],
        "park 3's timer and relay"
    );
    assert_eq!(due_of(&bystander).len(), 4);
    let states = |tasks: Vec<TaskRecord>| {
        tasks
            .into_iter()
            .map(|task| (task.park, task.state))
            .collect::<Vec<_>>()
    };
    let cancelled = vec![(ParkId(2), TaskState::Cancelled)];
    assert_eq!(
        states(store.tasks(TENANT, &disarmed).await.unwrap()),
        cancelled
    );
    let available = vec![(ParkId(2), TaskState::Available)];
    assert_eq!(
        states(store.tasks(TENANT, &bystander).await.unwrap()),
        available
    );
}

pub async fn asked_delivery_is_durable_and_taken_in_the_commit<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let asked = relay(&id, ParkId(1), now());

    let delivery = store.ask(&asked).await.unwrap();

    let expected = delivered(delivery, asked, 0);
    assert_eq!(
        store.delivery(delivery).await.unwrap(),
        Some(expected.clone())
    );
    assert_eq!(store.due_deliveries(10).await.unwrap(), [expected]);

    let (lapsed, taker) = taken_over(store, &id).await;
    let lost = StepCommit {
        taken: Some(delivery),
        ..step(&lapsed)
    };
    assert_eq!(
        refused_commit(store, &lost).await,
        Error::ClaimLost,
        "a lost claim takes nothing"
    );

    let taking = StepCommit {
        taken: Some(delivery),
        ..step(&taker)
    };
    store.commit(&taking).await.unwrap();
    assert_eq!(store.delivery(delivery).await.unwrap(), None);
    assert!(store.due_deliveries(10).await.unwrap().is_empty());
}

pub async fn every_delivery_kind_reads_back_as_asked<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let kinds = [
        DeliveryKind::Timer,
        DeliveryKind::Relay {
            message: message("m-1"),
        },
        DeliveryKind::TaskCompleted {
            output: json!({ "debited": 10, "nested": [1, null, "x"] }),
        },
        DeliveryKind::TaskFailed {
            code: "BANK.CLOSED".to_owned(),
            message: "closed".to_owned(),
        },
        DeliveryKind::TaskExhausted {
            code: "BANK.DOWN".to_owned(),
            message: "5 tries".to_owned(),
        },
    ];
    for (park, kind) in (1..).map(ParkId).zip(kinds) {
        let asked = NewDelivery {
            park,
            kind,
            ..relay(&id, park, now())
        };
        let delivery = store.ask(&asked).await.unwrap();
        assert_eq!(
            store.delivery(delivery).await.unwrap(),
            Some(delivered(delivery, asked, 0))
        );
    }
}

pub async fn deferred_delivery_is_not_due_until_its_time<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let asked = relay(&id, ParkId(1), now());
    let delivery = store.ask(&asked).await.unwrap();
    let later = now() + HOUR;

    store.defer(delivery, later).await.unwrap();

    assert!(store.due_deliveries(10).await.unwrap().is_empty());
    let deferred = delivered(
        delivery,
        NewDelivery {
            due_at: later,
            ..asked.clone()
        },
        1,
    );
    assert_eq!(store.delivery(delivery).await.unwrap(), Some(deferred));
    assert_eq!(store.next_due().await.unwrap(), Some(later));

    let past = now() - SignedDuration::from_secs(1);
    store.defer(delivery, past).await.unwrap();
    let due = delivered(
        delivery,
        NewDelivery {
            due_at: past,
            ..asked
        },
        2,
    );
    assert_eq!(store.due_deliveries(10).await.unwrap(), [due]);
}

pub async fn due_deliveries_are_oldest_first<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let now = now();
    let ago = |secs| now - SignedDuration::from_secs(secs);
    for (park, due_at) in [(2, ago(2)), (3, ago(3)), (4, now + HOUR), (1, ago(1))] {
        store.ask(&relay(&id, ParkId(park), due_at)).await.unwrap();
    }

    assert_eq!(
        parks(&store.due_deliveries(10).await.unwrap()),
        [ParkId(3), ParkId(2), ParkId(1)]
    );
    assert_eq!(
        parks(&store.due_deliveries(2).await.unwrap()),
        [ParkId(3), ParkId(2)]
    );
}

pub async fn discard_deletes<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let delivery = store.ask(&relay(&id, ParkId(1), now())).await.unwrap();

    store.discard(delivery).await.unwrap();

    assert_eq!(store.delivery(delivery).await.unwrap(), None);
    assert!(store.due_deliveries(10).await.unwrap().is_empty());
    store
        .discard(delivery)
        .await
        .expect("discarding twice is harmless");
}

pub async fn next_due_is_the_earliest_pending_delivery<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    assert_eq!(store.next_due().await.unwrap(), None);
    let (sooner, later) = (now() + HOUR, now() + HOUR * 2);
    store.ask(&relay(&id, ParkId(2), later)).await.unwrap();
    let first = store.ask(&relay(&id, ParkId(1), sooner)).await.unwrap();

    assert_eq!(store.next_due().await.unwrap(), Some(sooner));
    store.discard(first).await.unwrap();
    assert_eq!(store.next_due().await.unwrap(), Some(later));
}

pub async fn timer_arm_is_a_future_delivery<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let due = now() + HOUR;
    let claim = claimed(store, &id, LANE_A).await;

    store
        .commit(&arming(
            &claim,
            vec![Arm::Timer {
                park: ParkId(1),
                due,
            }],
        ))
        .await
        .unwrap();

    assert!(store.due_deliveries(10).await.unwrap().is_empty());
    assert_eq!(store.next_due().await.unwrap(), Some(due));

    let past = now() - SignedDuration::from_secs(1);
    let claim = claimed(store, &id, LANE_A).await;
    store
        .commit(&arming(
            &claim,
            vec![Arm::Timer {
                park: ParkId(2),
                due: past,
            }],
        ))
        .await
        .unwrap();
    let [fired] =
        <[Delivery; 1]>::try_from(store.due_deliveries(10).await.unwrap()).expect("one due timer");
    let expected = NewDelivery {
        tenant: TENANT.to_owned(),
        instance: id,
        park: ParkId(2),
        kind: DeliveryKind::Timer,
        due_at: past,
    };
    assert_eq!(fired, delivered(fired.id, expected, 0));
}

pub async fn buffered_message_is_matched_in_the_parks_own_transaction<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let early = BufferedMessage {
        channel: REPLIES.to_owned(),
        key: "t-1".to_owned(),
        message: message("reply-1"),
        expires_at: now() + HOUR,
    };
    let expired = BufferedMessage {
        key: "t-2".to_owned(),
        message: message("reply-2"),
        expires_at: now() - SignedDuration::from_secs(1),
        ..early.clone()
    };
    assert_eq!(store.buffer(TENANT, &early).await.unwrap(), None);
    assert_eq!(store.buffer(TENANT, &expired).await.unwrap(), None);
    let buffered = Some(InboxAnswer::buffered());
    assert_eq!(
        store
            .inbox_answer(TENANT, REPLIES, "reply-1")
            .await
            .unwrap(),
        buffered
    );
    assert_eq!(
        store.buffer(TENANT, &early).await.unwrap(),
        buffered,
        "buffered twice"
    );
    let claim = claimed(store, &id, LANE_A).await;

    let parks = arming(&claim, vec![wait(ParkId(1), "t-1"), wait(ParkId(2), "t-2")]);
    let committed = store.commit(&parks).await.unwrap();

    let [matched] =
        <[DeliveryId; 1]>::try_from(committed.due_now).expect("one message matched, once");
    let delivery = store
        .delivery(matched)
        .await
        .unwrap()
        .expect("the match is a delivery");
    assert_eq!(
        (delivery.instance.as_str(), delivery.park),
        (id.as_str(), ParkId(1))
    );
    assert_eq!(
        delivery.kind,
        DeliveryKind::Relay {
            message: early.message
        }
    );
    assert!(delivery.due_at <= Timestamp::now());
    let target = Some(WaitTarget {
        instance: id.clone(),
        park: ParkId(1),
    });
    assert_eq!(
        store.find_wait(TENANT, REPLIES, "t-1").await.unwrap(),
        target,
        "the relay consumes it"
    );

    let claim = claimed(store, &id, LANE_A).await;
    let repark = StepCommit {
        disarms: vec![ParkId(1)],
        ..arming(&claim, vec![wait(ParkId(3), "t-1")])
    };
    let committed = store.commit(&repark).await.unwrap();
    assert!(
        committed.due_now.is_empty(),
        "a matched message leaves the buffer"
    );
}

pub async fn buffer_relays_to_a_wait_armed_since_the_intake_looked<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let claim = claimed(store, &id, LANE_A).await;
    store
        .commit(&arming(&claim, vec![wait(ParkId(1), "t-1")]))
        .await
        .unwrap();
    let late = BufferedMessage {
        channel: REPLIES.to_owned(),
        key: "t-1".to_owned(),
        message: message("reply-1"),
        expires_at: now() + HOUR,
    };

    assert_eq!(store.buffer(TENANT, &late).await.unwrap(), None);

    let [relayed] =
        <[Delivery; 1]>::try_from(store.due_deliveries(10).await.unwrap()).expect("one relay");
    assert_eq!(
        (relayed.instance.as_str(), relayed.park),
        (id.as_str(), ParkId(1))
    );
    assert_eq!(
        relayed.kind,
        DeliveryKind::Relay {
            message: late.message
        }
    );
    let claim = claimed(store, &id, LANE_A).await;
    let repark = StepCommit {
        disarms: vec![ParkId(1)],
        ..arming(&claim, vec![wait(ParkId(2), "t-1")])
    };
    assert!(
        store.commit(&repark).await.unwrap().due_now.is_empty(),
        "nothing was buffered"
    );
}

pub async fn history_sequence_cannot_repeat<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let claim = claimed(store, &id, LANE_A).await;
    let mut commit = full_step(&claim, None);
    // The start wrote sequence 1.
    commit.history.push(event(1, HistoryKind::MessageReceived));

    let error = refused_commit(store, &commit).await;

    assert!(
        matches!(error, Error::Corrupt(_)),
        "a repeated sequence is a bug: {error:?}"
    );
}

pub async fn tenants_never_see_each_others_rows<S: Store>(store: &S) {
    let (id, other) = (id(1), id(2));
    started(store, TENANT, &id).await;
    let claim = claimed(store, &id, LANE_A).await;
    let commit = full_step(&claim, None);
    store.commit(&commit).await.unwrap();
    store
        .deploy(TENANT, "payments", "name: payments")
        .await
        .unwrap();
    let inbox = commit.inbox.as_ref().expect("the step consumed a message");

    assert_eq!(store.instance(OTHER_TENANT, &id).await.unwrap(), None);
    assert!(
        store
            .instances(OTHER_TENANT, &InstanceFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.history(OTHER_TENANT, &id).await.unwrap().is_empty());
    assert!(store.tasks(OTHER_TENANT, &id).await.unwrap().is_empty());
    assert!(store.outbox(OTHER_TENANT, &id).await.unwrap().is_empty());
    assert_eq!(
        store.find_wait(OTHER_TENANT, REPLIES, &id).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .inbox_answer(OTHER_TENANT, &inbox.channel, &inbox.event_id)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .deployments(Some(OTHER_TENANT))
            .await
            .unwrap()
            .is_empty()
    );
    let claim = store.claim(OTHER_TENANT, &id, &owner(LANE_A), HOUR).await;
    assert!(
        matches!(claim, Err(Error::InstanceNotFound(_))),
        "{claim:?}"
    );

    // Another tenant's message on the same channel and key neither reaches this tenant's wait…
    let message = BufferedMessage {
        channel: REPLIES.to_owned(),
        key: id.clone(),
        message: message(&inbox.event_id),
        expires_at: now() + HOUR,
    };
    assert_eq!(store.buffer(OTHER_TENANT, &message).await.unwrap(), None);
    assert!(store.due_deliveries(10).await.unwrap().is_empty());
    // …nor clashes with its alias.
    started(store, OTHER_TENANT, &other).await;
    let theirs = store
        .claim(OTHER_TENANT, &other, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let committed = store
        .commit(&arming(&theirs, vec![wait(ParkId(1), &id)]))
        .await
        .unwrap();
    assert_eq!(
        committed.due_now.len(),
        1,
        "their own buffered message is theirs"
    );
}

pub async fn instances_page_by_keyset<S: Store>(store: &S) {
    use Status::{Completed, Failed, Suspended};
    let rows = [
        (1, "a", Suspended),
        (2, "b", Failed),
        (3, "b", Suspended),
        (4, "a", Completed),
        (5, "a", Suspended),
    ];
    for (n, flow, status) in rows {
        let mut snapshot = snapshot(TENANT, &id(n), status);
        snapshot.instance.flow = flow.to_owned();
        store
            .commit(&start(snapshot, &format!("evt-{n}")))
            .await
            .unwrap();
    }
    let page = |filter: InstanceFilter| async move {
        let records = store.instances(TENANT, &filter).await.unwrap();
        records
            .into_iter()
            .map(|record| record.snapshot.instance.id)
            .collect::<Vec<_>>()
    };
    let ids = |ns: &[u32]| ns.iter().copied().map(id).collect::<Vec<_>>();
    let status = |status| InstanceFilter {
        status: Some(status),
        ..InstanceFilter::default()
    };
    let flow = |flow: &str| InstanceFilter {
        flow: Some(flow.to_owned()),
        ..InstanceFilter::default()
    };
    let after = |n, limit| InstanceFilter {
        after: Some(id(n)),
        limit,
        ..InstanceFilter::default()
    };

    assert_eq!(
        page(InstanceFilter::default()).await,
        ids(&[1, 2, 3, 4, 5]),
        "0 is no limit"
    );
    assert_eq!(page(status(Suspended)).await, ids(&[1, 3, 5]));
    assert_eq!(page(flow("a")).await, ids(&[1, 4, 5]));
    assert_eq!(
        page(InstanceFilter {
            flow: Some("a".to_owned()),
            ..status(Suspended)
        })
        .await,
        ids(&[1, 5])
    );
    assert_eq!(
        page(InstanceFilter {
            limit: 2,
            ..InstanceFilter::default()
        })
        .await,
        ids(&[1, 2])
    );
    assert_eq!(page(after(2, 2)).await, ids(&[3, 4]));
    assert_eq!(page(after(4, 2)).await, ids(&[5]));
    assert_eq!(page(after(5, 2)).await, ids(&[]));
    assert_eq!(
        page(InstanceFilter {
            status: Some(Suspended),
            ..after(1, 1)
        })
        .await,
        ids(&[3])
    );
}

pub async fn deploy_makes_version_n_plus_one_active_and_the_previous_draining<S: Store>(store: &S) {
    let deploy =
        |tenant, name, source| async move { store.deploy(tenant, name, source).await.unwrap() };
    let v1 = deploy(TENANT, "payments", "version: one").await;
    let v2 = deploy(TENANT, "payments", "version: two").await;
    let v3 = deploy(TENANT, "payments", "version: three").await;
    let refunds = deploy(TENANT, "refunds", "version: one").await;
    let elsewhere = deploy(OTHER_TENANT, "payments", "version: one").await;

    let summary = |record: &DeploymentRecord| (record.name.clone(), record.version, record.status);
    let active = |name: &str, version| (name.to_owned(), version, DeploymentStatus::Active);
    assert_eq!(
        [&v1, &v2, &v3, &refunds, &elsewhere].map(summary),
        [
            active("payments", 1),
            active("payments", 2),
            active("payments", 3),
            active("refunds", 1),
            active("payments", 1),
        ]
    );
    let draining = |record: DeploymentRecord| DeploymentRecord {
        status: DeploymentStatus::Draining,
        ..record
    };
    assert_eq!(
        store.deployments(Some(TENANT)).await.unwrap(),
        [draining(v1), draining(v2), v3, refunds]
    );
    assert_eq!(store.deployments(None).await.unwrap().len(), 5);
}

pub async fn the_deployment_revision_grows_with_every_deploy<S: Store>(store: &S) {
    let fresh = store.deployment_revision().await.unwrap();
    store
        .deploy(TENANT, "payments", "version: one")
        .await
        .unwrap();
    store
        .deploy(OTHER_TENANT, "payments", "version: one")
        .await
        .unwrap();
    store
        .deploy(TENANT, "payments", "version: two")
        .await
        .unwrap();

    assert_eq!(
        store.deployment_revision().await.unwrap(),
        fresh + 3,
        "every version of every tenant counts"
    );
}
