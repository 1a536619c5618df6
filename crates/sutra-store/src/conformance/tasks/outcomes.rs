//! Outcomes: a completion or a failure recorded with the task update and delivered to the
//! instance, retries that back off then exhaust, releases, extensions and disarms.

use super::*;

pub async fn completing_twice_is_refused<S: Store>(store: &S) {
    armed(store, TENANT, &id(1), task(PARK)).await;
    let lock = locked_one(store, WORKER_A, HOUR).await;
    store
        .complete_task(TENANT, &lock.id, &lock.lock_token, &json!({ "n": 1 }))
        .await
        .unwrap();

    for answer in every_answer(store, TENANT, &lock.id, &lock.lock_token).await {
        assert_lock_lost(answer);
    }
    assert_eq!(due(store).await.len(), 1, "one completion, delivered once");
}

/// A group member's completion (decision 0031): the claim and the task's completion under it,
/// one statement where the store can.
pub async fn a_member_claims_then_completes_and_nothing_else<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, task(PARK)).await;
    let lock = locked_one(store, WORKER_A, HOUR).await;
    let lane = owner(LANE_A);
    let claim = CompletingClaim {
        tenant: TENANT,
        instance: &instance,
        owner: &lane,
        claim_timeout: HOUR,
    };

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let (claimed, held) = group
        .claim_completing(&claim, &lock.id, &lock.lock_token)
        .await
        .unwrap();
    assert_eq!(
        (held.instance.as_str(), held.park),
        (instance.as_str(), PARK)
    );
    assert_eq!(claimed.token.kind, crate::ClaimKind::Locked);
    group.commit().await.unwrap();

    assert_eq!(record(store, &instance).await.state, TaskState::Completed);
    assert!(
        due(store).await.is_empty(),
        "completed in place: no delivery"
    );
    assert_eq!(
        owner_of(store, &instance).await,
        None,
        "the claim was the row lock"
    );
}

pub async fn a_member_whose_claim_or_lock_is_refused_leaves_the_task_as_it_was<S: Store>(
    store: &S,
) {
    let (held_elsewhere, free) = (id(1), id(2));
    armed(store, TENANT, &held_elsewhere, task(PARK)).await;
    let first = locked_one(store, WORKER_A, HOUR).await;
    armed(store, TENANT, &free, task(PARK)).await;
    let second = locked_one(store, WORKER_A, HOUR).await;
    claimed(store, &held_elsewhere, LANE_B).await;
    let lane = owner(LANE_A);
    let claim = |instance| CompletingClaim {
        tenant: TENANT,
        instance,
        owner: &lane,
        claim_timeout: HOUR,
    };

    let mut group = store.group(TENANT).await.unwrap();
    group.member(TENANT).await.unwrap();
    let refused = group
        .claim_completing(&claim(&held_elsewhere), &first.id, &first.lock_token)
        .await;
    assert_eq!(refused.map(drop), Err(Error::ClaimHeld));
    group.member(TENANT).await.unwrap();
    let lost = group
        .claim_completing(&claim(&free), &second.id, "not-the-token")
        .await;
    assert_lock_lost(lost);
    group.commit().await.unwrap();

    for (instance, lock) in [(&held_elsewhere, &first), (&free, &second)] {
        let unchanged = record(store, instance).await;
        assert_eq!(
            (unchanged.state, unchanged.locked_until),
            (TaskState::Locked, Some(lock.lock_expires_at))
        );
        store
            .complete_task(TENANT, &lock.id, &lock.lock_token, &json!({}))
            .await
            .expect("the worker's lock still holds");
    }
}

pub async fn completion_is_recorded_with_the_task_update<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, task(PARK)).await;
    let lock = locked_one(store, WORKER_A, HOUR).await;
    let output = json!({ "debited": 10, "nested": [1, null, "x"] });

    store
        .complete_task(TENANT, &lock.id, &lock.lock_token, &output)
        .await
        .unwrap();

    let task = record(store, &instance).await;
    assert_eq!(
        (task.state, task.locked_until),
        (TaskState::Completed, None)
    );
    let [delivery] = <[Delivery; 1]>::try_from(due(store).await).expect("one delivery, due now");
    assert_eq!(
        (delivery.instance.as_str(), delivery.park, delivery.kind),
        (
            instance.as_str(),
            PARK,
            DeliveryKind::TaskCompleted { output }
        )
    );
    assert_eq!(
        store
            .next_task_at(TENANT, &[TOPIC.to_owned()])
            .await
            .unwrap(),
        None,
        "a completed task is never polled again"
    );
    let claim = claimed(store, &instance, LANE_A).await;
    let taking = StepCommit {
        taken: Some(delivery.id),
        disarms: vec![disarm(PARK, ParkSort::Task)],
        ..step(&claim)
    };
    store.commit(&taking).await.unwrap();
    assert!(due(store).await.is_empty(), "the step took it");
    assert_eq!(record(store, &instance).await.state, TaskState::Completed);
}

pub async fn a_business_error_is_delivered_at_once<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, task(PARK)).await;
    let lock = locked_one(store, WORKER_A, HOUR).await;

    let state = store
        .fail_task(TENANT, &lock.id, &lock.lock_token, &failure(false))
        .await
        .unwrap();

    assert_eq!(state, TaskState::Failed, "whatever the budget");
    assert_eq!(record(store, &instance).await.state, TaskState::Failed);
    let [delivery] = <[Delivery; 1]>::try_from(due(store).await).expect("one delivery, due now");
    let TaskError { code, message } = failure(false).error;
    assert_eq!(
        (delivery.park, delivery.kind),
        (PARK, DeliveryKind::TaskFailed { code, message })
    );
}

pub async fn retries_back_off_then_exhaust<S: Store>(store: &S) {
    // Backing off: attempt 1's lock expires, attempt 2 fails; the retry waits backoff * 2.
    let slow = id(1);
    armed(store, TENANT, &slow, budgeted(2, HOUR, HOUR)).await;
    locked_one(store, WORKER_A, LAPSE).await;
    lapse().await;
    let second = locked_one(store, WORKER_B, HOUR).await;
    let before = now();
    let state = store
        .fail_task(TENANT, &second.id, &second.lock_token, &failure(true))
        .await
        .unwrap();
    let after = now();
    assert_eq!(state, TaskState::Available);
    let task = record(store, &slow).await;
    assert_eq!((task.state, task.attempt), (TaskState::Available, 3));
    assert_after(task.available_at, HOUR * 2, before, after);
    assert!(
        polled(store, WORKER_A, HOUR).await.is_empty(),
        "backing off"
    );
    assert_eq!(
        store
            .next_task_at(TENANT, &[TOPIC.to_owned()])
            .await
            .unwrap(),
        Some(task.available_at)
    );
    assert!(due(store).await.is_empty(), "a retry is not an outcome");

    // Exhausting: one retry allowed, and both attempts fail.
    let fast = id(2);
    armed(store, TENANT, &fast, budgeted(1, LAPSE, HOUR)).await;
    let first = locked_one(store, WORKER_A, HOUR).await;
    let state = store
        .fail_task(TENANT, &first.id, &first.lock_token, &failure(true))
        .await
        .unwrap();
    assert_eq!(state, TaskState::Available);
    lapse().await;
    let last = locked_one(store, WORKER_A, HOUR).await;
    assert_eq!((last.id.as_str(), last.attempt), (first.id.as_str(), 2));
    let exhausted = TaskFailure {
        error: TaskError {
            code: "BANK.GONE".to_owned(),
            message: "the last word".to_owned(),
        },
        retry: true,
    };
    let state = store
        .fail_task(TENANT, &last.id, &last.lock_token, &exhausted)
        .await
        .unwrap();

    assert_eq!(state, TaskState::Terminal);
    assert_eq!(record(store, &fast).await.state, TaskState::Terminal);
    let [delivery] = <[Delivery; 1]>::try_from(due(store).await).expect("one delivery, due now");
    let TaskError { code, message } = exhausted.error;
    assert_eq!(
        (delivery.instance.as_str(), delivery.kind),
        (fast.as_str(), DeliveryKind::TaskExhausted { code, message }),
        "the worker's last error"
    );
    assert!(polled(store, WORKER_A, HOUR).await.is_empty());
}

pub async fn a_lock_that_expires_counts_as_an_attempt<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, budgeted(1, HOUR, HOUR)).await;
    locked_one(store, WORKER_A, LAPSE).await;
    lapse().await;
    let last = locked_one(store, WORKER_B, LAPSE).await;
    assert_eq!(last.attempt, 2);
    lapse().await;

    let polled_after = polled(store, WORKER_A, HOUR).await;

    assert!(polled_after.is_empty(), "the budget is spent");
    assert_eq!(
        record(store, &instance).await.state,
        TaskState::Locked,
        "a poll leaves the spent task to the exhaustion"
    );
    let exhausted = store.exhaust_expired(TENANT).await.unwrap();
    let [exhausted] = <[_; 1]>::try_from(exhausted).expect("one exhausted delivery");
    let delivery = store.delivery(exhausted).await.unwrap().expect("recorded");
    let TaskError { code, message } = lock_expired(Some(WORKER_B), 2);
    assert_eq!(code, codes::TASK_LOCK_LOST.code);
    assert_eq!(
        (delivery.instance.as_str(), delivery.park, delivery.kind),
        (
            instance.as_str(),
            PARK,
            DeliveryKind::TaskExhausted { code, message }
        )
    );
    assert!(delivery.due_at <= Timestamp::now());
    assert_eq!(record(store, &instance).await.state, TaskState::Terminal);
    assert!(polled(store, WORKER_A, HOUR).await.is_empty());
    assert!(
        store.exhaust_expired(TENANT).await.unwrap().is_empty(),
        "exhausted once"
    );
}

pub async fn a_released_task_is_available_again_on_the_same_attempt<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, budgeted(1, HOUR, HOUR)).await;
    let first = locked_one(store, WORKER_A, HOUR).await;

    store
        .release_task(TENANT, &first.id, &first.lock_token)
        .await
        .unwrap();

    let task = record(store, &instance).await;
    assert_eq!(
        (task.state, task.attempt, task.locked_until),
        (TaskState::Available, 1, None),
        "handed back, not failed"
    );
    assert!(task.available_at <= now(), "available at once");
    // A refused answer's transaction is over before the refusal is: the poll right after it,
    // which skips a row another transaction holds, gets the task.
    assert_lock_lost(
        store
            .complete_task(TENANT, &first.id, &first.lock_token, &json!({}))
            .await,
    );
    let again = locked_one(store, WORKER_B, HOUR).await;
    assert_eq!((again.id.as_str(), again.attempt), (first.id.as_str(), 1));
    assert_ne!(again.lock_token, first.lock_token);
    assert!(due(store).await.is_empty(), "a hand-back is no outcome");
}

pub async fn extend_moves_the_lock_deadline<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, task(PARK)).await;
    let lock = locked_one(store, WORKER_A, SignedDuration::from_mins(1)).await;
    let before = now();

    let until = store
        .extend_task(TENANT, &lock.id, &lock.lock_token, HOUR)
        .await
        .unwrap();

    assert_after(until, HOUR, before, now());
    let task = record(store, &instance).await;
    assert_eq!(
        (task.state, task.attempt, task.locked_until),
        (TaskState::Locked, 1, Some(until))
    );
    assert_eq!(
        store
            .next_task_at(TENANT, &[TOPIC.to_owned()])
            .await
            .unwrap(),
        Some(until),
        "the task is next available when the extended lock expires"
    );
    store
        .complete_task(TENANT, &lock.id, &lock.lock_token, &json!({}))
        .await
        .expect("the token still holds the lock");
}

pub async fn a_disarmed_task_cannot_be_completed<S: Store>(store: &S) {
    let (polled_first, never_polled) = (id(1), id(2));
    armed(store, TENANT, &polled_first, task(PARK)).await;
    let lock = locked_one(store, WORKER_A, HOUR).await;
    armed(store, TENANT, &never_polled, task(PARK)).await;

    for instance in [&polled_first, &never_polled] {
        let claim = claimed(store, instance, LANE_A).await;
        let disarm = StepCommit {
            disarms: vec![disarm(PARK, ParkSort::Task)],
            ..step(&claim)
        };
        store.commit(&disarm).await.unwrap();
    }

    for answer in every_answer(store, TENANT, &lock.id, &lock.lock_token).await {
        assert_lock_lost(answer);
    }
    assert!(due(store).await.is_empty());
    assert!(
        polled(store, WORKER_B, HOUR).await.is_empty(),
        "a cancelled task is never handed out"
    );
    for instance in [&polled_first, &never_polled] {
        assert_eq!(record(store, instance).await.state, TaskState::Cancelled);
    }
}

/// A disarm cancels a task only when its park is a task's: the kind is the executor's word, and
/// a `receive`'s or a timer's disarm has no task to look for. Shown on a task at a park whose
/// disarm says otherwise, which the store must leave as it was.
pub async fn only_a_task_parks_disarm_cancels_its_task<S: Store>(store: &S) {
    let sorts = [
        ParkSort::Receive,
        ParkSort::Wait,
        ParkSort::Task,
        ParkSort::Call,
    ];
    for (n, sort) in (1..).zip(sorts) {
        let instance = id(n);
        armed(store, TENANT, &instance, task(PARK)).await;
        let claim = claimed(store, &instance, LANE_A).await;
        let disarming = StepCommit {
            disarms: vec![disarm(PARK, sort)],
            ..step(&claim)
        };
        store.commit(&disarming).await.unwrap();

        let expected = match sort {
            ParkSort::Task => TaskState::Cancelled,
            ParkSort::Receive | ParkSort::Wait | ParkSort::Call => TaskState::Available,
        };
        assert_eq!(record(store, &instance).await.state, expected, "{sort:?}");
    }
}

/// Claims taken ahead for a group (issue 35) answer each member as its own statement would
/// have: a free instance claimed, one held elsewhere refused as held and one that does not exist
/// as not found, both writing nothing; a completion's task completed under its claim, and one
/// whose lock token is wrong left locked.
pub async fn claims_taken_ahead_answer_as_claims_taken_one_by_one<S: Store>(store: &S) {
    let (free, held_elsewhere, completing, wrong_token, absent) =
        (id(1), id(2), id(3), id(4), id(5));
    let stored = started(store, TENANT, &free).await;
    started(store, TENANT, &held_elsewhere).await;
    claimed(store, &held_elsewhere, LANE_B).await;
    armed(store, TENANT, &completing, task(PARK)).await;
    let first = locked_one(store, WORKER_A, HOUR).await;
    armed(store, TENANT, &wrong_token, task(PARK)).await;
    let second = locked_one(store, WORKER_A, HOUR).await;
    let lane = owner(LANE_A);
    let ahead = [
        ClaimAhead {
            instance: &free,
            completing: None,
        },
        ClaimAhead {
            instance: &held_elsewhere,
            completing: None,
        },
        ClaimAhead {
            instance: &completing,
            completing: Some((&first.id, &first.lock_token)),
        },
        ClaimAhead {
            instance: &wrong_token,
            completing: Some((&second.id, "not-the-token")),
        },
        ClaimAhead {
            instance: &absent,
            completing: None,
        },
    ];

    let mut group = store.group(TENANT).await.unwrap();
    group
        .claim_ahead(TENANT, &lane, HOUR, &ahead)
        .await
        .unwrap();
    group.member(TENANT).await.unwrap();
    let taken = group.claim(TENANT, &free, &lane, HOUR).await.unwrap();
    assert_eq!(taken.token.kind, crate::ClaimKind::Locked);
    assert_eq!(taken.snapshot, stored);
    group.member(TENANT).await.unwrap();
    let refused = group.claim(TENANT, &held_elsewhere, &lane, HOUR).await;
    assert_eq!(refused.map(drop), Err(Error::ClaimHeld));
    let claim = |instance| CompletingClaim {
        tenant: TENANT,
        instance,
        owner: &lane,
        claim_timeout: HOUR,
    };
    group.member(TENANT).await.unwrap();
    let (_, held) = group
        .claim_completing(&claim(&completing), &first.id, &first.lock_token)
        .await
        .unwrap();
    assert_eq!(
        (held.instance.as_str(), held.park),
        (completing.as_str(), PARK)
    );
    group.member(TENANT).await.unwrap();
    let lost = group
        .claim_completing(&claim(&wrong_token), &second.id, "not-the-token")
        .await;
    assert_lock_lost(lost);
    group.member(TENANT).await.unwrap();
    let missing = group.claim(TENANT, &absent, &lane, HOUR).await;
    assert!(
        matches!(missing, Err(Error::InstanceNotFound(_))),
        "{missing:?}"
    );
    group.commit().await.unwrap();

    assert_eq!(record(store, &completing).await.state, TaskState::Completed);
    let unchanged = record(store, &wrong_token).await;
    assert_eq!(
        (unchanged.state, unchanged.locked_until),
        (TaskState::Locked, Some(second.lock_expires_at))
    );
    assert_eq!(
        owner_of(store, &held_elsewhere).await.as_deref(),
        Some(LANE_B)
    );
}
