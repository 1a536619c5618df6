//! Conformance of the claim (SPEC §5.2): a compare-and-set that refuses instead of waiting, grows
//! the fence every time, is re-entrant for its owner and goes stale after the timeout; release
//! gives it back; the sweep clears claims by age alone and counts recoveries. An instance whose
//! snapshot cannot be decoded is failed in its row, and every claim refuses it until its mark is
//! cleared (docs/decisions/0082).

use sutra_core::snapshot::Failure;

use super::fixtures::*;
use crate::ClaimAhead;

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

/// A snapshot of a format no build knows: committed as any other, it cannot be read back.
async fn started_unreadable<S: Store>(store: &S, id: &str) {
    let mut snapshot = snapshot(TENANT, id, Status::Suspended);
    snapshot.format = 999;
    let commit = start(snapshot, &format!("start-{id}"));
    store.commit(&commit).await.expect("a start commits");
}

/// The failure the engine writes on an unreadable instance's row.
fn unreadable_failure() -> Failure {
    Failure {
        code: "SUTRA.STORE.CORRUPT".to_owned(),
        detail: "its snapshot cannot be decoded: repair it, then restore".to_owned(),
        token: None,
        node: None,
    }
}

pub async fn an_unreadable_instance_is_failed_in_its_row_and_every_claim_refuses_it<S: Store>(
    store: &S,
) {
    let (bad, good) = (id(1), id(2));
    started_unreadable(store, &bad).await;
    started(store, TENANT, &good).await;
    let failure = unreadable_failure();
    assert!(matches!(
        claim_as(store, &bad, LANE_A, HOUR).await,
        Err(Error::Corrupt(_))
    ));

    assert!(
        !store
            .mark_unreadable(TENANT, &good, &failure)
            .await
            .unwrap(),
        "a snapshot that decodes is not marked"
    );
    assert!(store.mark_unreadable(TENANT, &bad, &failure).await.unwrap());
    assert!(
        !store.mark_unreadable(TENANT, &bad, &failure).await.unwrap(),
        "marked once"
    );
    assert!(
        !store
            .mark_unreadable(OTHER_TENANT, &bad, &failure)
            .await
            .unwrap()
    );

    // Listed as failed with the mark's failure, without reading its snapshot, and the page lists
    // the others; with the tokens asked, it has none.
    for tokens in [false, true] {
        let all = InstanceFilter::default();
        let listed = store
            .instance_summaries(TENANT, &all, tokens)
            .await
            .unwrap();
        let shown: Vec<_> = listed
            .iter()
            .map(|s| (s.status, s.failure.clone()))
            .collect();
        assert_eq!(
            shown,
            [
                (Status::Failed, Some(failure.clone())),
                (Status::Suspended, None)
            ]
        );
        assert_eq!(listed[0].tokens, None);
    }
    let failed = InstanceFilter {
        status: Some(Status::Failed),
        ..InstanceFilter::default()
    };
    let listed = store
        .instance_summaries(TENANT, &failed, false)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, bad);
    // Read alone, it answers the mark's detail: what did not decode, and what to do.
    let read = store.instance(TENANT, &bad).await;
    assert_eq!(read, Err(Error::Corrupt(failure.detail.clone())));

    // Every claim refuses it — durable, in a group, taken ahead — and the others are claimed.
    assert!(matches!(
        claim_as(store, &bad, LANE_A, HOUR).await,
        Err(Error::Corrupt(_))
    ));
    let mut group = store.group(TENANT).await.unwrap();
    let ahead = [&bad, &good].map(|instance| ClaimAhead {
        instance,
        completing: None,
    });
    group
        .claim_ahead(TENANT, &owner(LANE_A), HOUR, &ahead)
        .await
        .unwrap();
    let refused = group.claim(TENANT, &bad, &owner(LANE_A), HOUR).await;
    assert!(matches!(refused, Err(Error::Corrupt(_))), "{refused:?}");
    let taken = group.claim(TENANT, &good, &owner(LANE_A), HOUR).await;
    assert_eq!(taken.unwrap().snapshot.status, Status::Suspended);
    group.rollback().await.unwrap();
    let mut group = store.group(TENANT).await.unwrap();
    let refused = group.claim(TENANT, &bad, &owner(LANE_A), HOUR).await;
    assert!(matches!(refused, Err(Error::Corrupt(_))), "{refused:?}");
}

pub async fn an_unreadable_mark_is_cleared_only_once_the_snapshot_decodes<S: Store>(store: &S) {
    let (bad, good) = (id(1), id(2));
    started_unreadable(store, &bad).await;
    started(store, TENANT, &good).await;
    store
        .mark_unreadable(TENANT, &bad, &unreadable_failure())
        .await
        .unwrap();

    let refused = store.clear_unreadable(TENANT, &bad).await;
    assert!(matches!(refused, Err(Error::Corrupt(_))), "{refused:?}");
    let listed = store
        .instance_summaries(TENANT, &InstanceFilter::default(), false)
        .await
        .unwrap();
    assert_eq!(
        (listed[0].status, listed[0].failure.is_some()),
        (Status::Failed, true),
        "a refused clear leaves the mark"
    );
    assert_eq!(store.clear_unreadable(TENANT, &good).await, Ok(None));
    assert!(matches!(
        store.clear_unreadable(TENANT, &id(3)).await,
        Err(Error::InstanceNotFound(_))
    ));
    assert!(matches!(
        store.clear_unreadable(OTHER_TENANT, &bad).await,
        Err(Error::InstanceNotFound(_))
    ));
}
