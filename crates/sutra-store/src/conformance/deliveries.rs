//! Conformance of the deliveries (SPEC §5.6): durable when asked, taken in the commit, due in
//! order and at their time, handed out to one dispatcher at a time and counted (the dispatch
//! mark, docs/decisions/0024), deferred, failed (counted apart, docs/decisions/0047), discarded.

use super::fixtures::*;

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
    assert_eq!(
        store.due_deliveries(10, REDELIVER_AT_ONCE).await.unwrap(),
        [dispatched(expected, 1)]
    );

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
    assert!(nothing_due(store).await);
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

    assert!(nothing_due(store).await);
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
    assert_eq!(
        store.due_deliveries(10, REDELIVER_AT_ONCE).await.unwrap(),
        [dispatched(due, 1)]
    );
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
        parks(&store.due_deliveries(2, HOUR).await.unwrap()),
        [ParkId(3), ParkId(2)]
    );
    assert_eq!(
        parks(&store.due_deliveries(10, HOUR).await.unwrap()),
        [ParkId(1)],
        "the rest of what is due, in the next batch"
    );
}

pub async fn discard_deletes<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let delivery = store.ask(&relay(&id, ParkId(1), now())).await.unwrap();

    store.discard(delivery).await.unwrap();

    assert_eq!(store.delivery(delivery).await.unwrap(), None);
    assert!(nothing_due(store).await);
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

    assert!(nothing_due(store).await);
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
    let [fired] = <[Delivery; 1]>::try_from(store.due_deliveries(10, HOUR).await.unwrap())
        .expect("one due timer");
    let expected = NewDelivery {
        tenant: TENANT.to_owned(),
        instance: id,
        park: ParkId(2),
        kind: DeliveryKind::Timer,
        due_at: past,
    };
    assert_eq!(fired, dispatched(delivered(fired.id, expected, 0), 1));
}

pub async fn a_dispatched_delivery_is_not_due_again_until_redeliver_after<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let asked = relay(&id, ParkId(1), now());
    let delivery = store.ask(&asked).await.unwrap();

    assert_eq!(
        store.due_deliveries(10, HOUR).await.unwrap(),
        [dispatched(delivered(delivery, asked, 0), 1)],
        "handed out as it came due, and counted"
    );
    assert!(
        store.due_deliveries(10, HOUR).await.unwrap().is_empty(),
        "no other look hands it out while its dispatcher may be taking it"
    );
    let marked = store
        .delivery(delivery)
        .await
        .unwrap()
        .expect("handing out is not taking");
    assert!(
        marked.due_at > now() + SignedDuration::from_mins(30),
        "due again one redelivery delay later, not at {}",
        marked.due_at
    );
    assert_eq!(store.next_due().await.unwrap(), Some(marked.due_at));

    // A dispatcher that died with what it handed out leaves it due again once the delay has
    // passed, and the next look counts one dispatch more.
    let dropped = store.ask(&relay(&id, ParkId(2), now())).await.unwrap();
    let first = store.due_deliveries(10, LAPSE).await.unwrap();
    lapse().await;
    let again = store.due_deliveries(10, LAPSE).await.unwrap();
    assert_eq!(
        [counts(&first), counts(&again)],
        [[(dropped, 1)], [(dropped, 2)]]
    );
}

pub async fn a_deferral_clears_the_dispatch_count<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let delivery = store.ask(&relay(&id, ParkId(1), now())).await.unwrap();
    for nth in 1..=2 {
        let handed_out = store.due_deliveries(10, LAPSE).await.unwrap();
        assert_eq!(counts(&handed_out), [(delivery, nth)]);
        lapse().await;
    }

    store
        .defer(delivery, now() - SignedDuration::from_secs(1))
        .await
        .unwrap();

    let deferred = store.delivery(delivery).await.unwrap().expect("deferred");
    assert_eq!(
        (deferred.attempts, deferred.dispatches),
        (1, 0),
        "a deferral counts an attempt and shows that its dispatcher survived"
    );
    let handed_out = store.due_deliveries(10, HOUR).await.unwrap();
    assert_eq!(
        counts(&handed_out),
        [(delivery, 1)],
        "counted from one again"
    );
}

pub async fn a_failed_step_is_counted_apart_from_refusals_and_keeps_its_error<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let asked = relay(&id, ParkId(1), now());
    let delivery = store.ask(&asked).await.unwrap();
    let later = now() + HOUR;
    store.due_deliveries(10, LAPSE).await.unwrap();

    store.defer(delivery, later).await.unwrap();
    store
        .fail_attempt(delivery, later, "the step panicked")
        .await
        .unwrap();
    store
        .fail_attempt(delivery, later, "a corrupt snapshot")
        .await
        .unwrap();

    let failed = store
        .delivery(delivery)
        .await
        .unwrap()
        .expect("still asked");
    assert_eq!(
        failed,
        Delivery {
            failures: 2,
            last_error: Some("a corrupt snapshot".to_owned()),
            ..delivered(
                delivery,
                NewDelivery {
                    due_at: later,
                    ..asked
                },
                1
            )
        },
        "a held claim's refusal is no failure, a failure no refusal; the last error is kept \
         and the dispatches cleared"
    );
    assert!(nothing_due(store).await, "not due before its backoff");
}

pub async fn failures_survive_the_hand_out_and_a_deferral<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let delivery = store.ask(&relay(&id, ParkId(1), now())).await.unwrap();
    let past = now() - SignedDuration::from_secs(1);
    store
        .fail_attempt(delivery, past, "the step panicked")
        .await
        .unwrap();
    store.defer(delivery, past).await.unwrap();

    let [handed_out] = <[Delivery; 1]>::try_from(store.due_deliveries(10, HOUR).await.unwrap())
        .expect("due again");
    assert_eq!(
        (handed_out.failures, handed_out.last_error.as_deref()),
        (1, Some("the step panicked")),
        "the dispatcher reads how often the delivery's step failed, or it is retried forever"
    );
}

pub async fn two_dispatchers_never_hand_out_the_same_delivery<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    // An overlap is a matter of timing: the race runs again on fresh rows, so that one has many
    // chances to show.
    for round in 0..10 {
        let mut asked = Vec::new();
        for park in 1..=6 {
            let park = ParkId(round * 6 + park);
            asked.push(store.ask(&relay(&id, park, now())).await.unwrap());
        }

        let (first, second) =
            tokio::join!(store.due_deliveries(4, HOUR), store.due_deliveries(4, HOUR),);

        let batches = [first.unwrap(), second.unwrap()];
        let mut handed_out: Vec<(DeliveryId, u32)> =
            batches.iter().flat_map(|batch| counts(batch)).collect();
        handed_out.sort_unstable();
        let once: Vec<(DeliveryId, u32)> = asked.into_iter().map(|id| (id, 1)).collect();
        assert_eq!(
            handed_out, once,
            "round {round}: every delivery once, none twice: {batches:?}"
        );
    }
    assert!(
        store.due_deliveries(10, HOUR).await.unwrap().is_empty(),
        "a delivery is not handed out again while it is marked"
    );
}

/// Each delivery handed out, with how many times it has been.
fn counts(batch: &[Delivery]) -> Vec<(DeliveryId, u32)> {
    batch
        .iter()
        .map(|delivery| (delivery.id, delivery.dispatches))
        .collect()
}
