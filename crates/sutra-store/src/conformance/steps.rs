//! Conformance of the step commit (SPEC §5.2): committed and unowned again are one fact, a
//! lapsed or stale claim cannot commit, a start is owned by whoever inserted its inbox row,
//! aliases are unique, disarms resolve every row behind a park, and history never repeats.

use super::fixtures::*;

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
        .instance_summaries(TENANT, &InstanceFilter::default(), false)
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
        disarms: vec![
            disarm(ParkId(1), ParkSort::Receive),
            disarm(ParkId(2), ParkSort::Task),
        ],
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
    let due = store.due_deliveries(100, REDELIVER_AT_ONCE).await.unwrap();
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
