//! Conformance of the outbox worker's operations (SPEC §5.4): claim a batch, mark each row sent
//! or failed. These are what make delivery at-least-once with a stable idempotency key: a row is
//! in one sender's hands at a time, a dead sender's rows are taken over, a sent row is never sent
//! again, a failing row backs off, and a hopeless one is poisoned but kept.
//!
//! The rows are written by a start step that emits, as a running flow writes them.

use super::fixtures::*;
use crate::{OutboxId, OutboxRetry, OutboxRow};

const LEDGER: &str = "ledger";

/// The row a step writes for an `emit` at audit sequence `seq` on node `node`.
fn emit(id: &str, seq: u64, node: &str) -> OutboxEntry {
    OutboxEntry {
        channel: LEDGER.to_owned(),
        payload: json!({ "instance": id, "node": node, "amount": 10 }),
        message_key: Some(format!("key-{node}")),
        idempotency_key: format!("{id}:{seq}:{node}"),
    }
}

/// Starts an instance of `tenant` whose first step emits once per node, in order; returns the
/// rows it wrote.
async fn emitting<S: Store>(store: &S, tenant: &str, id: &str, nodes: &[&str]) -> Vec<OutboxEntry> {
    let mut commit = start(
        snapshot(tenant, id, Status::Suspended),
        &format!("start-{id}"),
    );
    // The start's own history event is sequence 1.
    commit.outbox = (2..)
        .zip(nodes)
        .map(|(seq, node)| emit(id, seq, node))
        .collect();
    store
        .commit(&commit)
        .await
        .expect("a step that emits commits");
    commit.outbox
}

async fn claim<S: Store>(store: &S, batch: u32, stale_after: SignedDuration) -> Vec<OutboxRow> {
    store.claim_outbox(batch, stale_after).await.unwrap()
}

fn keys(rows: &[OutboxRow]) -> Vec<&str> {
    rows.iter()
        .map(|row| row.entry.idempotency_key.as_str())
        .collect()
}

fn entry_keys(entries: &[OutboxEntry]) -> Vec<&str> {
    entries
        .iter()
        .map(|entry| entry.idempotency_key.as_str())
        .collect()
}

/// Claims exactly one row.
async fn claim_one<S: Store>(store: &S, stale_after: SignedDuration) -> OutboxRow {
    <[OutboxRow; 1]>::try_from(claim(store, 10, stale_after).await)
        .map(|[row]| row)
        .expect("exactly one row is due")
}

/// The only outbox row of instance `id` of [`TENANT`], as listed.
async fn listed<S: Store>(store: &S, id: &str) -> OutboxRecord {
    <[OutboxRecord; 1]>::try_from(store.outbox(TENANT, id).await.unwrap())
        .map(|[record]| record)
        .expect("the instance wrote one row")
}

fn hour_from_now() -> Timestamp {
    now() + HOUR
}

pub async fn a_row_is_claimed_by_one_sender_at_a_time<S: Store>(store: &S) {
    let written = emitting(store, TENANT, &id(1), &["a", "b", "c", "d", "e", "f"]).await;

    let (first, second, third) = tokio::join!(
        store.claim_outbox(4, HOUR),
        store.claim_outbox(4, HOUR),
        store.claim_outbox(4, HOUR),
    );

    let claims = [first.unwrap(), second.unwrap(), third.unwrap()];
    let mut claimed: Vec<&str> = claims.iter().flat_map(|rows| keys(rows)).collect();
    claimed.sort_unstable();
    let mut expected = entry_keys(&written);
    expected.sort_unstable();
    assert_eq!(claimed, expected, "every row once, none twice: {claims:?}");
    assert!(
        claim(store, 10, HOUR).await.is_empty(),
        "a row is skipped while its claim is live"
    );
}

pub async fn claims_take_the_oldest_due_rows_first<S: Store>(store: &S) {
    let written = emitting(store, TENANT, &id(1), &["a", "b", "c"]).await;
    let [a, b, c] = <[&str; 3]>::try_from(entry_keys(&written)).unwrap();

    let first = claim(store, 2, HOUR).await;
    assert_eq!(keys(&first), [a, b], "in the order they were written");
    // A retry scheduled before every other row's due time is the oldest due.
    let long_ago = OutboxRetry::At(now() - HOUR);
    store
        .outbox_failed(first[1].id, "HTTP 503", long_ago)
        .await
        .unwrap();

    assert_eq!(keys(&claim(store, 10, HOUR).await), [b, c]);
}

pub async fn a_stale_claim_is_cleared_and_retried<S: Store>(store: &S) {
    emitting(store, TENANT, &id(1), &["notify"]).await;
    let claimed = claim_one(store, HOUR).await;
    assert!(claim(store, 10, HOUR).await.is_empty());

    // The sender died holding the claim; whoever scans next takes the row over.
    lapse().await;
    let retaken = claim_one(store, LAPSE).await;

    assert_eq!(
        retaken, claimed,
        "the same row, its key and its attempts unchanged"
    );
    store.outbox_sent(retaken.id).await.unwrap();
    let record = listed(store, &id(1)).await;
    assert!(record.sent_at.is_some(), "{record:?}");
    assert_eq!(record.attempts, 1, "the crashed send was never recorded");
}

pub async fn sent_rows_are_never_claimed_again<S: Store>(store: &S) {
    emitting(store, TENANT, &id(1), &["notify"]).await;
    let row = claim_one(store, HOUR).await;

    store.outbox_sent(row.id).await.unwrap();

    lapse().await;
    assert!(
        claim(store, 10, LAPSE).await.is_empty(),
        "sent, even once its claim would be stale"
    );
    let sent = listed(store, &id(1)).await;
    assert!(sent.sent_at.is_some() && !sent.poisoned, "{sent:?}");
    assert_eq!(sent.attempts, 1);
    // A stale sender's late reports change nothing.
    store.outbox_sent(row.id).await.unwrap();
    store
        .outbox_failed(row.id, "timed out", OutboxRetry::At(now()))
        .await
        .unwrap();
    assert_eq!(listed(store, &id(1)).await, sent);
    assert!(claim(store, 10, LAPSE).await.is_empty());
}

pub async fn failed_sends_back_off<S: Store>(store: &S) {
    let written = emitting(store, TENANT, &id(1), &["later", "now"]).await;
    let rows = claim(store, 10, HOUR).await;
    let later = hour_from_now();

    store
        .outbox_failed(rows[0].id, "HTTP 500", OutboxRetry::At(later))
        .await
        .unwrap();
    store
        .outbox_failed(rows[1].id, "connection refused", OutboxRetry::At(now()))
        .await
        .unwrap();

    // The failure cleared the claim: a one-hour staleness does not hold the due row back.
    let retried = claim_one(store, HOUR).await;
    assert_eq!(retried.entry, written[1]);
    assert_eq!(retried.attempts, 1, "the failed attempt is counted");
    assert!(
        claim(store, 10, HOUR).await.is_empty(),
        "not before its next attempt"
    );
    let backing_off = &store.outbox(TENANT, &id(1)).await.unwrap()[0];
    assert_eq!(
        (
            backing_off.attempts,
            backing_off.last_error.as_deref(),
            backing_off.next_attempt_at,
        ),
        (1, Some("HTTP 500"), later)
    );
    assert!(backing_off.sent_at.is_none() && !backing_off.poisoned);
    store.outbox_sent(retried.id).await.unwrap();
    let recovered = &store.outbox(TENANT, &id(1)).await.unwrap()[1];
    assert_eq!(
        (recovered.attempts, recovered.last_error.as_deref()),
        (2, None),
        "a send that succeeds leaves no failure behind"
    );
}

pub async fn past_max_attempts_a_row_is_poisoned_and_stays_visible<S: Store>(store: &S) {
    let written = emitting(store, TENANT, &id(1), &["notify"]).await;
    let row = claim_one(store, HOUR).await;

    store
        .outbox_failed(row.id, "HTTP 500", OutboxRetry::Poison)
        .await
        .unwrap();

    lapse().await;
    assert!(
        claim(store, 10, LAPSE).await.is_empty(),
        "a poisoned row is no longer pending"
    );
    let poisoned = listed(store, &id(1)).await;
    assert_eq!(poisoned.entry, written[0], "kept whole");
    assert!(
        poisoned.poisoned && poisoned.sent_at.is_none(),
        "{poisoned:?}"
    );
    assert_eq!(
        (poisoned.attempts, poisoned.last_error.as_deref()),
        (1, Some("HTTP 500"))
    );
    store
        .outbox_failed(row.id, "again", OutboxRetry::At(now()))
        .await
        .unwrap();
    assert_eq!(
        listed(store, &id(1)).await,
        poisoned,
        "a late failure report does not revive it"
    );
}

pub async fn the_idempotency_key_is_unique_and_stable<S: Store>(store: &S) {
    let written = emitting(store, TENANT, &id(1), &["notify"]).await;
    let first = claim_one(store, HOUR).await;
    assert_eq!(first.entry, written[0], "read back as written");
    assert_eq!(
        (first.tenant.as_str(), first.instance.as_str()),
        (TENANT, id(1).as_str())
    );
    assert_eq!((first.deployment.as_str(), first.version), ("payments", 1));

    store
        .outbox_failed(first.id, "HTTP 502", OutboxRetry::At(now()))
        .await
        .unwrap();
    let retry = claim_one(store, HOUR).await;
    assert_eq!(
        (retry.id, &retry.entry),
        (first.id, &first.entry),
        "every attempt sends the same key and payload"
    );

    let mut repeat = start(snapshot(TENANT, &id(2), Status::Suspended), "start-repeat");
    repeat.outbox = written;
    let error = refused_commit(store, &repeat).await;
    assert!(
        matches!(error, Error::Corrupt(_)),
        "a repeated key is a bug: {error:?}"
    );
}

pub async fn tenants_never_see_each_others_outbox<S: Store>(store: &S) {
    let (ours, theirs) = (id(1), id(2));
    emitting(store, TENANT, &ours, &["a"]).await;
    emitting(store, OTHER_TENANT, &theirs, &["b"]).await;

    assert!(store.outbox(OTHER_TENANT, &ours).await.unwrap().is_empty());
    assert!(store.outbox(TENANT, &theirs).await.unwrap().is_empty());
    assert_eq!(store.outbox(TENANT, &ours).await.unwrap().len(), 1);
    // The worker serves every tenant, and each row says whose it is.
    let mut claimed: Vec<(String, String, OutboxId)> = claim(store, 10, HOUR)
        .await
        .into_iter()
        .map(|row| (row.tenant, row.instance, row.id))
        .collect();
    claimed.sort_unstable();
    let owners: Vec<(&str, &str)> = claimed
        .iter()
        .map(|(tenant, instance, _)| (tenant.as_str(), instance.as_str()))
        .collect();
    assert_eq!(
        owners,
        [(TENANT, ours.as_str()), (OTHER_TENANT, theirs.as_str())]
    );
}
