//! What every area of the suite builds its cases from: the tenants, channels and owners, the
//! steps of each shape, and the footprint a step leaves in the store's reads.

// The suite's common vocabulary, for each area to take with `use super::fixtures::*`.
pub(super) use std::time::Duration;

pub(super) use jiff::{SignedDuration, Timestamp};
pub(super) use serde_json::json;
pub(super) use sutra_core::snapshot::{InstanceInfo, ParkId, ParkSort, Snapshot, Status, TokenId};
pub(super) use sutra_core::step::{Disarm, HistoryEvent, HistoryKind, Message};

pub(super) use crate::{
    Arm, BufferedMessage, ClaimKind, Claimed, Delivery, DeliveryId, DeliveryKind, DeploymentRecord,
    DeploymentStatus, Error, InboxAnswer, InboxEntry, InstanceFilter, InstanceKey, InstanceRecord,
    Lookup, NewDelivery, OutboxEntry, OutboxRecord, Owner, Result, Retirement, StepCommit, Store,
    SweepOutcome, TaskRecord, TaskState, WaitTarget,
};

pub(super) const TENANT: &str = "acme";
pub(super) const OTHER_TENANT: &str = "globex";
/// The channel instances start on.
pub(super) const STARTS: &str = "transfer-requests";
/// The channel instances wait on.
pub(super) const REPLIES: &str = "bank-replies";
pub(super) const LANE_A: &str = "replica-a/lane-0";
pub(super) const LANE_B: &str = "replica-b/lane-0";
/// A claim timeout no test outlives: the claim stays live.
pub(super) const HOUR: SignedDuration = SignedDuration::from_hours(1);
/// A claim timeout every claim outlives after [`lapse`].
pub(super) const LAPSE: SignedDuration = SignedDuration::from_millis(1);
/// A redelivery delay that holds nothing back: a delivery handed out is due again at once, so
/// that the next look sees whatever a step did not take.
pub(super) const REDELIVER_AT_ONCE: SignedDuration = SignedDuration::ZERO;
/// The parks [`full_step`] arms.
pub(super) const WAIT_PARK: ParkId = ParkId(1);
pub(super) const TIMER_PARK: ParkId = ParkId(2);
pub(super) const TASK_PARK: ParkId = ParkId(3);

/// Sleeps well past [`LAPSE`].
pub(super) async fn lapse() {
    tokio::time::sleep(Duration::from_millis(10)).await;
}

/// Now, to the microsecond, so that what the store reads back compares equal.
pub(super) fn now() -> Timestamp {
    Timestamp::from_microsecond(Timestamp::now().as_microsecond()).expect("now is in range")
}

pub(super) fn owner(name: &str) -> Owner {
    Owner(name.to_owned())
}

/// A UUIDv7-shaped id; ids sort by `n`, as UUIDv7 ids sort by creation.
pub(super) fn id(n: u32) -> String {
    format!("0190c0de-0000-7000-8000-{n:012}")
}

pub(super) fn snapshot(tenant: &str, id: &str, status: Status) -> Snapshot {
    let mut snapshot = Snapshot::new(InstanceInfo {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        deployment: "payments".to_owned(),
        version: 1,
        flow: "money-transfer".to_owned(),
        parent: None,
    });
    snapshot.status = status;
    snapshot
}

pub(super) fn event(seq: u64, kind: HistoryKind) -> HistoryEvent {
    HistoryEvent {
        seq,
        at: now(),
        kind,
        node: Some("debit".to_owned()),
        token: Some(TokenId(1)),
        detail: json!({ "seq": seq }),
    }
}

pub(super) fn message(event_id: &str) -> Message {
    Message {
        id: event_id.to_owned(),
        kind: "bank.reply".to_owned(),
        source: "/bank".to_owned(),
        subject: Some("t-1".to_owned()),
        time: None,
        data: json!({ "transferId": "t-1", "approved": true }),
    }
}

pub(super) fn answer(id: &str, status: Status) -> InboxAnswer {
    InboxAnswer {
        instance: Some(id.to_owned()),
        status: status.as_str().to_owned(),
    }
}

/// The step that starts the instance of `snapshot` on message `event_id`.
pub(super) fn start(mut snapshot: Snapshot, event_id: &str) -> StepCommit {
    snapshot.audit_seq = 1;
    let inbox = InboxEntry {
        channel: STARTS.to_owned(),
        event_id: event_id.to_owned(),
        answer: answer(&snapshot.instance.id, snapshot.status),
        key: None,
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
        held_by: None,
        announce_end: false,
        children: Vec::new(),
        report: None,
    }
}

/// Starts a suspended instance; returns its snapshot.
pub(super) async fn started<S: Store>(store: &S, tenant: &str, id: &str) -> Snapshot {
    let commit = start(
        snapshot(tenant, id, Status::Suspended),
        &format!("start-{id}"),
    );
    store.commit(&commit).await.expect("a start commits");
    commit.snapshot
}

pub(super) async fn claim_as<S: Store>(
    store: &S,
    id: &str,
    who: &str,
    timeout: SignedDuration,
) -> Result<Claimed> {
    store.claim(TENANT, id, &owner(who), timeout).await
}

/// Claims an instance whose claim is free.
pub(super) async fn claimed<S: Store>(store: &S, id: &str, who: &str) -> Claimed {
    claim_as(store, id, who, HOUR)
        .await
        .expect("the claim is free")
}

/// Lane A claims, its claim lapses, and lane B takes the instance over: returns both claims.
pub(super) async fn taken_over<S: Store>(store: &S, id: &str) -> (Claimed, Claimed) {
    let lapsed = claimed(store, id, LANE_A).await;
    lapse().await;
    let taker = claim_as(store, id, LANE_B, LAPSE)
        .await
        .expect("a lapsed claim is taken");
    (lapsed, taker)
}

/// The smallest step: the claimed snapshot written back, nothing else.
pub(super) fn step(claimed: &Claimed) -> StepCommit {
    StepCommit {
        claim: Some(claimed.token.clone()),
        snapshot: claimed.snapshot.clone(),
        history: Vec::new(),
        arms: Vec::new(),
        disarms: Vec::new(),
        outbox: Vec::new(),
        taken: None,
        inbox: None,
        held_by: None,
        announce_end: false,
        children: Vec::new(),
        report: None,
    }
}

/// A step arming `arms` and nothing else.
pub(super) fn arming(claimed: &Claimed, arms: Vec<Arm>) -> StepCommit {
    StepCommit {
        arms,
        ..step(claimed)
    }
}

/// A step that writes a row of every kind: a new variable, the next history event, a wait, a
/// timer and a task, an outbox row, the inbox row of the message it consumed, and takes `taken`.
pub(super) fn full_step(claimed: &Claimed, taken: Option<DeliveryId>) -> StepCommit {
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
            key: None,
        }),
        snapshot,
        ..step(claimed)
    }
}

pub(super) fn wait(park: ParkId, key: &str) -> Arm {
    Arm::Wait {
        park,
        channel: REPLIES.to_owned(),
        key: key.to_owned(),
        group: None,
    }
}

/// The disarm of a park of kind `sort`.
pub(super) fn disarm(park: ParkId, sort: ParkSort) -> Disarm {
    Disarm { park, sort }
}

pub(super) fn task(park: ParkId) -> Arm {
    Arm::Task {
        park,
        topic: "debit-account".to_owned(),
        input: json!({ "account": "a-1", "amount": 10 }),
        retries: 3,
        backoff: SignedDuration::from_secs(5),
        lock: SignedDuration::from_mins(1),
        taken_by: None,
    }
}

pub(super) fn relay(id: &str, park: ParkId, due_at: Timestamp) -> NewDelivery {
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

/// The delivery `asked` should read back as, never handed out.
pub(super) fn delivered(id: DeliveryId, asked: NewDelivery, attempts: u32) -> Delivery {
    Delivery {
        id,
        tenant: asked.tenant,
        instance: asked.instance,
        park: asked.park,
        kind: asked.kind,
        due_at: asked.due_at,
        attempts,
        dispatches: 0,
        failures: 0,
        last_error: None,
    }
}

/// `delivery` as a look hands it out for the `nth` time since it was asked or last deferred.
pub(super) fn dispatched(delivery: Delivery, nth: u32) -> Delivery {
    Delivery {
        dispatches: nth,
        ..delivery
    }
}

pub(super) fn parks(deliveries: &[Delivery]) -> Vec<ParkId> {
    deliveries.iter().map(|delivery| delivery.park).collect()
}

/// The `(channel, key, park)` of every wait a step arms.
pub(super) fn armed_waits(commit: &StepCommit) -> Vec<(&str, &str, ParkId)> {
    commit
        .arms
        .iter()
        .filter_map(|arm| match arm {
            Arm::Wait {
                park, channel, key, ..
            } => Some((channel.as_str(), key.as_str(), *park)),
            _ => None,
        })
        .collect()
}

/// Everything a step can have written, as the trait's reads show it.
#[derive(Debug, PartialEq)]
pub(super) struct Footprint {
    pub(super) instance: Option<InstanceRecord>,
    pub(super) history: Vec<HistoryEvent>,
    /// What each of the step's waits finds, in [`armed_waits`] order.
    pub(super) waits: Vec<Option<WaitTarget>>,
    pub(super) tasks: Vec<TaskRecord>,
    pub(super) outbox: Vec<OutboxRecord>,
    pub(super) inbox: Option<InboxAnswer>,
    pub(super) taken: Option<Delivery>,
    pub(super) next_due: Option<Timestamp>,
}

pub(super) async fn footprint<S: Store>(store: &S, commit: &StepCommit) -> Footprint {
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
pub(super) async fn refused_commit<S: Store>(store: &S, commit: &StepCommit) -> Error {
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
pub(super) async fn assert_committed<S: Store>(store: &S, commit: &StepCommit) {
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

pub(super) async fn owner_of<S: Store>(store: &S, id: &str) -> Option<String> {
    record(store, id).await.owner
}

/// Whether no delivery is due now (handing none out: nothing is marked).
pub(super) async fn nothing_due<S: Store>(store: &S) -> bool {
    store
        .due_deliveries(10, REDELIVER_AT_ONCE)
        .await
        .unwrap()
        .is_empty()
}

pub(super) async fn record<S: Store>(store: &S, id: &str) -> InstanceRecord {
    store
        .instance(TENANT, id)
        .await
        .unwrap()
        .expect("the instance exists")
}
