//! Fixtures shared by the PostgreSQL-specific tests: databases, stores, and the smallest steps
//! that write each kind of row.

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot, Status};
use sutra_core::step::{HistoryEvent, HistoryKind, Message};
use sutra_store::prelude::*;
use sutra_store::{
    Arm, BufferedMessage, Claimed, InboxAnswer, InboxEntry, OutboxEntry, Owner, StepCommit,
};
use sutra_store_postgres::{PostgresOptions, PostgresStore};
use sutra_testkit::postgres::TestDatabase;

pub const TENANT: &str = "acme";
pub const OTHER_TENANT: &str = "globex";
pub const REPLIES: &str = "bank-replies";
pub const TOPIC: &str = "debit-account";
pub const HOUR: SignedDuration = SignedDuration::from_hours(1);

/// A store on `database`, as one replica opens it: serving as a role that may act for tenants
/// only, with a role of its own for the system's work (decision 0040).
pub async fn replica(database: &TestDatabase) -> PostgresStore {
    let options = PostgresOptions {
        system_url: Some(database.system_url().to_owned()),
        ..PostgresOptions::default()
    };
    sutra_store_postgres::open(database.serving_url(), &options)
        .await
        .expect("the test database opens")
}

pub fn owner(name: &str) -> Owner {
    Owner(name.to_owned())
}

pub fn message(event_id: &str) -> Message {
    Message {
        id: event_id.to_owned(),
        kind: "bank.reply".to_owned(),
        source: "/bank".to_owned(),
        subject: None,
        time: None,
        data: json!({ "approved": true }),
    }
}

/// A message buffered for an hour on `key` of [`REPLIES`].
pub fn early(event_id: &str, key: &str) -> BufferedMessage {
    BufferedMessage {
        channel: REPLIES.to_owned(),
        key: key.to_owned(),
        message: message(event_id),
        expires_at: Timestamp::now() + HOUR,
    }
}

/// Starts a suspended instance: writes its instance, inbox and history rows.
pub async fn started(store: &PostgresStore, tenant: &str, id: &str) {
    let mut snapshot = Snapshot::new(InstanceInfo {
        id: id.to_owned(),
        tenant: tenant.to_owned(),
        deployment: "payments".to_owned(),
        version: 1,
        flow: "money-transfer".to_owned(),
        parent: None,
    });
    snapshot.status = Status::Suspended;
    snapshot.audit_seq = 1;
    let start = StepCommit {
        claim: None,
        history: vec![HistoryEvent {
            seq: 1,
            at: Timestamp::now(),
            kind: HistoryKind::Started,
            node: None,
            token: None,
            detail: json!({}),
        }],
        arms: Vec::new(),
        disarms: Vec::new(),
        outbox: Vec::new(),
        taken: None,
        inbox: Some(InboxEntry {
            channel: "transfer-requests".to_owned(),
            event_id: format!("start-{id}"),
            answer: InboxAnswer {
                instance: Some(id.to_owned()),
                status: "suspended".to_owned(),
            },
            key: None,
        }),
        snapshot,
        held_by: None,
        announce_end: false,
        children: Vec::new(),
        report: None,
    };
    store.commit(&start).await.expect("a start commits");
}

pub async fn claimed(store: &PostgresStore, tenant: &str, id: &str) -> Claimed {
    store
        .claim(tenant, id, &owner("replica-a/lane-0"), HOUR)
        .await
        .expect("the claim is free")
}

/// A step that writes the claimed snapshot back and arms `arms`.
pub fn arming(claimed: &Claimed, arms: Vec<Arm>) -> StepCommit {
    StepCommit {
        claim: Some(claimed.token.clone()),
        snapshot: claimed.snapshot.clone(),
        history: Vec::new(),
        arms,
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

pub fn wait(park: u64, key: &str) -> Arm {
    Arm::Wait {
        park: ParkId(park),
        channel: REPLIES.to_owned(),
        key: key.to_owned(),
        group: None,
    }
}

pub fn task(park: u64) -> Arm {
    Arm::Task {
        park: ParkId(park),
        topic: TOPIC.to_owned(),
        input: json!({ "amount": 10 }),
        retries: 3,
        backoff: SignedDuration::from_secs(5),
        lock: SignedDuration::from_mins(1),
        taken_by: None,
    }
}

/// The row a step writes for an `emit`.
pub fn emit(id: &str, n: u32) -> OutboxEntry {
    OutboxEntry {
        channel: "ledger".to_owned(),
        payload: json!({ "n": n }),
        message_key: None,
        idempotency_key: format!("{id}:{n}:notify"),
    }
}
