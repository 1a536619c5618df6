//! Conformance of answers across processes (decision 0024): the holder a step records is what
//! the next claim of the instance reads, and, on a store replicas share, an announced end is
//! heard by the processes listening once its commit lands — one announcement per group — and
//! never for a commit that did not land or did not ask. A store no other process shares
//! announces nothing.

use super::fixtures::*;
use crate::EndNotice;

const HOLDER: &str = "replica-a";
const OTHER_HOLDER: &str = "replica-b";

/// A step that completes the claimed instance and announces it.
fn ending(claimed: &Claimed) -> StepCommit {
    let mut snapshot = claimed.snapshot.clone();
    snapshot.status = Status::Completed;
    StepCommit {
        snapshot,
        announce_end: true,
        ..step(claimed)
    }
}

/// The next notice, within a time no healthy store needs.
async fn hear<S: Store>(store: &S) -> EndNotice {
    tokio::time::timeout(Duration::from_secs(10), store.end_notice())
        .await
        .expect("a notice arrives")
        .expect("the listener listens")
}

pub async fn the_holder_a_step_records_is_read_by_the_next_claim<S: Store>(store: &S) {
    let (held, unheld) = (id(1), id(2));
    let start = StepCommit {
        held_by: Some(HOLDER.to_owned()),
        ..start(snapshot(TENANT, &held, Status::Suspended), "start-held")
    };
    store.commit(&start).await.unwrap();
    started(store, TENANT, &unheld).await;

    // A durable claim reads it, and a step that holds no caller leaves it as it was.
    let first = claimed(store, &held, LANE_A).await;
    assert_eq!(first.held_by.as_deref(), Some(HOLDER));
    store.commit(&step(&first)).await.unwrap();

    // A group member's claim reads it too, and a step that holds a caller replaces it.
    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let second = group
        .claim(TENANT, &held, &owner(LANE_B), HOUR)
        .await
        .unwrap();
    assert_eq!(second.held_by.as_deref(), Some(HOLDER));
    let holding = StepCommit {
        held_by: Some(OTHER_HOLDER.to_owned()),
        ..step(&second)
    };
    group.commit_step(&holding).await.unwrap();
    group.commit().await.unwrap();
    let third = claimed(store, &held, LANE_A).await;
    assert_eq!(third.held_by.as_deref(), Some(OTHER_HOLDER));

    assert_eq!(claimed(store, &unheld, LANE_A).await.held_by, None);
}

pub async fn an_announced_end_is_heard_once_its_commit_lands<S: Store>(store: &S) {
    if !store.shared_by_replicas() {
        let heard = tokio::time::timeout(Duration::from_millis(50), store.end_notice()).await;
        assert!(
            heard.is_err(),
            "a store no process shares announced {heard:?}"
        );
        return;
    }
    // The listener says when it starts: what was announced before reached no one here.
    assert_eq!(hear(store).await, EndNotice::Listening);
    let (rolled_back, unasked, alone, first, second) = (id(1), id(2), id(3), id(4), id(5));
    for instance in [&rolled_back, &unasked, &alone, &first, &second] {
        started(store, TENANT, instance).await;
    }

    // A group that does not commit announces nothing, nor does a step that does not ask to.
    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let claim = group
        .claim(TENANT, &rolled_back, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    group.commit_step(&ending(&claim)).await.unwrap();
    group.rollback().await.unwrap();
    let claim = claimed(store, &unasked, LANE_A).await;
    let unannounced = StepCommit {
        announce_end: false,
        ..ending(&claim)
    };
    store.commit(&unannounced).await.unwrap();

    // Notices arrive in commit order, so the first one heard shows that neither was announced.
    let claim = claimed(store, &alone, LANE_A).await;
    store.commit(&ending(&claim)).await.unwrap();
    assert_eq!(hear(store).await, EndNotice::Ended(vec![alone]));

    // A group announces every member's end at once.
    let mut group = store.group(TENANT).await.unwrap();
    for instance in [&first, &second] {
        group.member(TENANT).await.unwrap();
        let claim = group
            .claim(TENANT, instance, &owner(LANE_A), HOUR)
            .await
            .unwrap();
        group.commit_step(&ending(&claim)).await.unwrap();
    }
    group.commit().await.unwrap();
    assert_eq!(hear(store).await, EndNotice::Ended(vec![first, second]));
}
