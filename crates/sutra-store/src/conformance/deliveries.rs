//! Conformance of the deliveries (SPEC §5.6): durable when asked, taken in the commit, due in
//! order and at their time, deferred, discarded.

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
