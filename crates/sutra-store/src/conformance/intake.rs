//! Conformance of intake's early messages: a buffered message and the park on its key never
//! miss each other, whichever transaction comes first.

use super::fixtures::*;

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
        disarms: vec![disarm(ParkId(1), ParkSort::Receive)],
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
        <[Delivery; 1]>::try_from(store.due_deliveries(10, REDELIVER_AT_ONCE).await.unwrap())
            .expect("one relay");
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
        disarms: vec![disarm(ParkId(1), ParkSort::Receive)],
        ..arming(&claim, vec![wait(ParkId(2), "t-1")])
    };
    assert!(
        store.commit(&repark).await.unwrap().due_now.is_empty(),
        "nothing was buffered"
    );
}

pub async fn a_lookup_answers_a_consumed_message_and_otherwise_finds_its_wait<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let claim = claimed(store, &id, LANE_A).await;
    let commit = full_step(&claim, None);
    store.commit(&commit).await.unwrap();
    let consumed = commit.inbox.as_ref().expect("the step consumed a message");

    let again = store
        .look_up(TENANT, &consumed.channel, &consumed.event_id, Some(&id))
        .await
        .unwrap();
    assert_eq!(
        again,
        Lookup {
            answer: Some(consumed.answer.clone()),
            wait: None
        },
        "a consumed message is answered as it was first, whatever its key now names"
    );
    let fresh = store
        .look_up(TENANT, REPLIES, "reply-new", Some(&id))
        .await
        .unwrap();
    let park = WaitTarget {
        instance: id.clone(),
        park: WAIT_PARK,
    };
    assert_eq!(
        fresh,
        Lookup {
            answer: None,
            wait: Some(park)
        }
    );
    let uncorrelated = store.look_up(TENANT, REPLIES, "reply-new", None).await;
    assert_eq!(uncorrelated.unwrap(), Lookup::default());
    let foreign = store
        .look_up(
            OTHER_TENANT,
            &consumed.channel,
            &consumed.event_id,
            Some(&id),
        )
        .await;
    assert_eq!(
        foreign.unwrap(),
        Lookup::default(),
        "tenants never see each other's rows"
    );
}

pub async fn a_start_an_instance_waits_for_is_refused_before_it_writes<S: Store>(store: &S) {
    let waiting = id(1);
    started(store, TENANT, &waiting).await;
    let claim = claimed(store, &waiting, LANE_A).await;
    // Parks on REPLIES with the instance's id as its key.
    store.commit(&full_step(&claim, None)).await.unwrap();
    let newcomer = id(2);
    let mut start = start(
        snapshot(TENANT, &newcomer, Status::Suspended),
        "reply-early",
    );
    let inbox = start.inbox.as_mut().expect("a start consumes a message");
    inbox.channel = REPLIES.to_owned();
    inbox.key = Some(waiting.clone());

    let refused = store.commit(&start).await;

    assert_eq!(
        refused,
        Err(Error::Waited {
            channel: REPLIES.to_owned(),
            key: waiting.clone()
        })
    );
    assert_eq!(store.instance(TENANT, &newcomer).await.unwrap(), None);
    assert_eq!(
        store
            .inbox_answer(TENANT, REPLIES, "reply-early")
            .await
            .unwrap(),
        None,
        "a refused start consumes nothing"
    );
    start.inbox.as_mut().unwrap().key = Some("nobody-waits".to_owned());
    store
        .commit(&start)
        .await
        .expect("a key nobody waits on starts");
}

/// Two arms of one race ([`Arm::Wait`]'s `group`) each with a buffered message on its key: the
/// first arm's is taken and the second's stays buffered, since the first match wins the race
/// and a delivery to the losing arm could never apply.
pub async fn one_arm_of_a_race_takes_a_buffered_message<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    for key in ["pay-1", "cancel-1"] {
        let early = BufferedMessage {
            channel: REPLIES.to_owned(),
            key: key.to_owned(),
            message: message(&format!("early-{key}")),
            expires_at: now() + HOUR,
        };
        assert_eq!(store.buffer(TENANT, &early).await.unwrap(), None);
    }
    let arm = |park: u64, key: &str| Arm::Wait {
        park: ParkId(park),
        channel: REPLIES.to_owned(),
        key: key.to_owned(),
        group: Some(7),
    };
    let claim = claimed(store, &id, LANE_A).await;
    let race = arming(&claim, vec![arm(1, "pay-1"), arm(2, "cancel-1")]);
    let committed = store.commit(&race).await.unwrap();

    let [matched] = <[DeliveryId; 1]>::try_from(committed.due_now).expect("one arm matched");
    let delivery = store.delivery(matched).await.unwrap().expect("a delivery");
    assert_eq!(delivery.park, ParkId(1));

    // The losing arm disarmed, its message is still there for a receive that parks later.
    let claim = claimed(store, &id, LANE_A).await;
    let later = StepCommit {
        disarms: vec![disarm(ParkId(2), ParkSort::Receive)],
        ..arming(&claim, vec![wait(ParkId(3), "cancel-1")])
    };
    let committed = store.commit(&later).await.unwrap();
    assert_eq!(
        committed.due_now.len(),
        1,
        "the losing arm's message stayed buffered"
    );
}
