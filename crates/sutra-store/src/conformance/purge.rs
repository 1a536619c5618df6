//! Conformance of the history purger (SPEC §3 `sutra.history.retention`, §7.2): terminal
//! instances past the retention go with every row that hangs off them, in bounded batches;
//! `failed` instances stay whatever their age, because they wait for an operator, and so do live
//! ones. Expired buffered messages and long-sent outbox rows go too; pending outbox rows stay
//! until sent, whoever wrote them.
//!
//! "Old" is made by sleeping past [`LAPSE`] and purging with it as the retention; nothing is old
//! under an hour's retention.

use super::fixtures::*;
use crate::Purged;

/// Ends instance `id` in `status` with a step that leaves a row of every kind behind (see
/// [`full_step`]); returns that step.
async fn ended<S: Store>(store: &S, id: &str, status: Status) -> StepCommit {
    started(store, TENANT, id).await;
    let claim = claimed(store, id, LANE_A).await;
    let mut step = full_step(&claim, None);
    step.snapshot.status = status;
    store.commit(&step).await.expect("the step commits");
    step
}

fn buffered(event_id: &str, expires_at: Timestamp) -> BufferedMessage {
    BufferedMessage {
        channel: REPLIES.to_owned(),
        key: "nobody-waits".to_owned(),
        message: message(event_id),
        expires_at,
    }
}

/// Marks the outbox rows of `ids` sent.
async fn send_outbox_of<S: Store>(store: &S, ids: &[&str]) {
    for row in store.claim_outbox(100, HOUR).await.unwrap() {
        if ids.contains(&row.instance.as_str()) {
            store.outbox_sent(row.id).await.unwrap();
        }
    }
}

async fn start_answer<S: Store>(store: &S, id: &str) -> Option<InboxAnswer> {
    store
        .inbox_answer(TENANT, STARTS, &format!("start-{id}"))
        .await
        .unwrap()
}

pub async fn the_purger_removes_old_terminal_instances_and_never_failed_ones<S: Store>(store: &S) {
    let (completed, cancelled, failed, live) = (id(1), id(2), id(3), id(4));
    let gone = [
        ended(store, &completed, Status::Completed).await,
        ended(store, &cancelled, Status::Cancelled).await,
    ];
    let kept = [
        ended(store, &failed, Status::Failed).await,
        ended(store, &live, Status::Suspended).await,
    ];
    send_outbox_of(store, &[&completed, &failed]).await;
    store
        .buffer(TENANT, &buffered("early-expired", now() - HOUR))
        .await
        .unwrap();
    store
        .buffer(TENANT, &buffered("early-waiting", now() + HOUR))
        .await
        .unwrap();
    let mut before = Vec::new();
    for step in &kept {
        before.push(footprint(store, step).await);
    }

    let expiry_only = Purged {
        buffered: 1,
        ..Purged::default()
    };
    assert_eq!(store.purge(HOUR, 10).await.unwrap(), expiry_only);
    lapse().await;
    let one_batch = Purged {
        instances: 1,
        outbox: 1,
        ..Purged::default()
    };
    assert_eq!(store.purge(LAPSE, 1).await.unwrap(), one_batch, "bounded");
    assert_eq!(store.purge(LAPSE, 10).await.unwrap(), one_batch);
    assert_eq!(store.purge(LAPSE, 10).await.unwrap(), Purged::default());

    for step in &gone {
        let id = &step.snapshot.instance.id;
        let seen = footprint(store, step).await;
        assert_eq!(seen.instance, None, "{id}");
        assert_eq!(seen.history, [], "{id}: history goes with it");
        assert_eq!(seen.waits, [None], "{id}: so do its waits");
        assert_eq!(seen.tasks, [], "{id}: and its tasks");
        assert_eq!(seen.inbox, None, "{id}: and the messages it consumed");
        assert_eq!(start_answer(store, id).await, None, "{id}");
    }
    let pending = store.outbox(TENANT, &cancelled).await.unwrap();
    assert_eq!(pending.len(), 1, "a pending row waits to be sent");
    for (step, before) in kept.iter().zip(before) {
        let id = &step.snapshot.instance.id;
        let seen = footprint(store, step).await;
        let unsent: Vec<_> = before
            .outbox
            .iter()
            .filter(|row| row.sent_at.is_none())
            .cloned()
            .collect();
        let expected = Footprint {
            outbox: unsent,
            // The earliest due delivery of the whole table, which may have been a purged one's.
            next_due: seen.next_due,
            ..before
        };
        assert_eq!(seen, expected, "{id} is kept; only its sent rows went");
        assert!(start_answer(store, id).await.is_some(), "{id}");
    }
    let inbox = |event: &'static str| store.inbox_answer(TENANT, REPLIES, event);
    assert_eq!(inbox("early-expired").await.unwrap(), None);
    assert_eq!(
        inbox("early-waiting").await.unwrap(),
        Some(InboxAnswer::buffered())
    );
}
