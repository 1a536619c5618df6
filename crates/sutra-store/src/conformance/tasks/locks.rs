//! Locks: one poller at a time, a lock's own duration, the oldest tasks first, expiry, and the
//! token that proves a lock and nothing else.

use super::*;

pub async fn a_task_is_locked_by_one_poller_at_a_time<S: Store>(store: &S) {
    let instances = [id(1), id(2), id(3)];
    for instance in &instances {
        armed(store, TENANT, instance, task(PARK)).await;
    }

    let polls = ["worker-1", "worker-2", "worker-3", "worker-4"].map(|w| poll(w, 2, Some(HOUR)));
    let pollers = tokio::join!(
        store.poll_tasks(&polls[0]),
        store.poll_tasks(&polls[1]),
        store.poll_tasks(&polls[2]),
        store.poll_tasks(&polls[3]),
    );

    let mut locked: Vec<LockedTask> = [pollers.0, pollers.1, pollers.2, pollers.3]
        .into_iter()
        .flat_map(|polled| polled.unwrap().tasks)
        .collect();
    locked.sort_by(|a, b| a.id.cmp(&b.id));
    let ids: Vec<_> = locked.iter().map(|task| task.id.clone()).collect();
    let expected: Vec<_> = instances.iter().map(|instance| task_id(instance)).collect();
    assert_eq!(ids, expected, "each task once");
    let tokens: HashSet<_> = locked.iter().map(|task| &task.lock_token).collect();
    assert_eq!(tokens.len(), 3, "every lock has its own token");
    assert!(polled(store, WORKER_A, HOUR).await.is_empty());
    for instance in &instances {
        let task = record(store, instance).await;
        assert_eq!((task.state, task.attempt), (TaskState::Locked, 1));
    }
}

/// `arm`, a task, armed locked for `worker` (eager dispatch, decision 0038).
fn taken(mut arm: Arm, worker: &str, lock: SignedDuration) -> Arm {
    if let Arm::Task { taken_by, .. } = &mut arm {
        *taken_by = Some(TakenBy {
            worker: worker.to_owned(),
            lock,
        });
    }
    arm
}

/// Eager dispatch (decision 0038): a task armed for a worker is locked for it by the commit
/// that arms it and answered with that commit; no poll takes it while the lock holds, and the
/// step's other tasks are armed available as ever.
pub async fn a_task_armed_for_a_worker_is_locked_for_it_alone<S: Store>(store: &S) {
    let instance = id(1);
    started(store, TENANT, &instance).await;
    let claim = store
        .claim(TENANT, &instance, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let other_park = ParkId(2);
    let arms = vec![taken(task(PARK), WORKER_A, HOUR), task(other_park)];
    let before = now();

    let committed = store.commit(&arming(&claim, arms)).await.unwrap();

    let after = now();
    let [eager] = <[LockedTask; 1]>::try_from(committed.taken).expect("one task taken");
    assert_eq!(
        (
            eager.id.as_str(),
            eager.instance.as_str(),
            eager.topic.as_str()
        ),
        (task_id(&instance).as_str(), instance.as_str(), TOPIC)
    );
    assert_eq!(eager.input, json!({ "account": "a-1", "amount": 10 }));
    assert_eq!(eager.attempt, 1);
    assert_after(eager.lock_expires_at, HOUR, before, after);
    let listed = store.tasks(TENANT, &instance).await.unwrap();
    let row = listed
        .iter()
        .find(|task| task.id == eager.id)
        .expect("its row");
    assert_eq!(
        (row.state, row.attempt, row.worker.as_deref()),
        (TaskState::Locked, 1, Some(WORKER_A))
    );
    let held_until = row.locked_until.expect("a locked row has an expiry");
    assert!(
        held_until >= eager.lock_expires_at,
        "the row holds at least as long as its worker was told: {held_until} < {}",
        eager.lock_expires_at
    );
    let others = polled(store, WORKER_B, HOUR).await;
    let others: Vec<_> = others.iter().map(|task| task.id.as_str()).collect();
    assert_eq!(
        others,
        [format!("{instance}:{other_park}").as_str()],
        "a poll takes only the task nobody took"
    );
    store
        .complete_task(TENANT, &eager.id, &eager.lock_token, &json!({}))
        .await
        .unwrap();
}

/// A task armed locked for a worker that never reports (its answer was lost, or the worker
/// died) is any other task whose lock expired: a poll takes it on its next attempt.
pub async fn an_eager_lock_that_expires_is_an_attempt_like_any_other<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, taken(task(PARK), WORKER_A, LAPSE)).await;
    lapse().await;

    let retaken = locked_one(store, WORKER_B, HOUR).await;

    assert_eq!((retaken.id, retaken.attempt), (task_id(&instance), 2));
    assert_eq!(
        record(store, &instance).await.worker.as_deref(),
        Some(WORKER_B)
    );
}

pub async fn a_poll_takes_the_oldest_tasks_of_its_topics_with_their_own_lock<S: Store>(store: &S) {
    armed(store, TENANT, &id(1), task(PARK)).await;
    armed(store, TENANT, &id(2), on_other_topic()).await;
    armed(store, TENANT, &id(3), task(PARK)).await;
    let before = now();

    let oldest = store.poll_tasks(&poll(WORKER_A, 1, None)).await.unwrap();

    let after = now();
    let [first] = <[LockedTask; 1]>::try_from(oldest.tasks).expect("max 1");
    assert_eq!(
        (
            first.id.as_str(),
            first.instance.as_str(),
            first.topic.as_str()
        ),
        (task_id(&id(1)).as_str(), id(1).as_str(), TOPIC)
    );
    assert_eq!(first.input, json!({ "account": "a-1", "amount": 10 }));
    assert_eq!(first.attempt, 1);
    // `task` arms lock for a minute.
    assert_after(
        first.lock_expires_at,
        SignedDuration::from_mins(1),
        before,
        after,
    );
    let rest = locked_one(store, WORKER_A, HOUR).await;
    assert_eq!(rest.id, task_id(&id(3)), "another topic is not polled");
    let other = TaskPoll {
        topics: vec![OTHER_TOPIC.to_owned(), "unknown".to_owned()],
        ..poll(WORKER_B, 10, None)
    };
    let polled = store.poll_tasks(&other).await.unwrap().tasks;
    assert_eq!(polled.len(), 1);
    assert_eq!(polled[0].id, task_id(&id(2)));
    let listed = record(store, &id(2)).await;
    assert_eq!(listed.worker.as_deref(), Some(WORKER_B));
    assert_eq!(listed.locked_until, Some(polled[0].lock_expires_at));
}

pub async fn an_expired_lock_makes_the_task_available_again<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, task(PARK)).await;
    let first = locked_one(store, WORKER_A, LAPSE).await;
    lapse().await;

    let second = locked_one(store, WORKER_B, HOUR).await;

    assert_eq!(second.id, first.id);
    assert_ne!(second.lock_token, first.lock_token);
    assert_eq!(
        (first.attempt, second.attempt),
        (1, 2),
        "the expired lock was an attempt"
    );
    assert_eq!(
        record(store, &instance).await.worker.as_deref(),
        Some(WORKER_B)
    );
    assert_lock_lost(
        store
            .complete_task(TENANT, &first.id, &first.lock_token, &json!({}))
            .await,
    );
    store
        .complete_task(TENANT, &second.id, &second.lock_token, &json!({}))
        .await
        .unwrap();
}

pub async fn a_wrong_or_expired_lock_token_is_refused<S: Store>(store: &S) {
    let (held, expired) = (id(1), id(2));
    armed(store, TENANT, &held, task(PARK)).await;
    let lock = locked_one(store, WORKER_A, HOUR).await;

    for answer in every_answer(store, TENANT, &lock.id, "not-the-token").await {
        assert_lock_lost(answer);
    }
    for answer in every_answer(store, TENANT, &task_id(&id(9)), &lock.lock_token).await {
        assert_not_found(answer);
    }
    let unchanged = record(store, &held).await;
    assert_eq!(
        (unchanged.state, unchanged.attempt, unchanged.locked_until),
        (TaskState::Locked, 1, Some(lock.lock_expires_at)),
        "a refusal writes nothing"
    );

    armed(store, TENANT, &expired, task(PARK)).await;
    let short = locked_one(store, WORKER_A, LAPSE).await;
    lapse().await;
    for answer in every_answer(store, TENANT, &short.id, &short.lock_token).await {
        assert_lock_lost(answer);
    }
    assert!(due(store).await.is_empty(), "no outcome was delivered");
}
