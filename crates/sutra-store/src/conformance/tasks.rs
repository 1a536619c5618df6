//! Conformance of the pull surface (SPEC §5.5): locks are exclusive and expire, a token proves a
//! lock and nothing else, every outcome reaches the instance as a delivery written with the task
//! update, and a task's budget ends — even when its workers keep dying instead of failing it.
//!
//! Locks meant to expire last [`LAPSE`] and the tests sleep past them; locks meant to hold last
//! an hour. Nothing asserts that a short lock is still held.

use std::collections::HashSet;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sutra_core::codes;
use sutra_core::snapshot::{ParkId, ParkSort};
use sutra_core::step::TaskError;

use super::fixtures::{
    HOUR, LANE_A, LANE_B, LAPSE, OTHER_TENANT, REDELIVER_AT_ONCE, TENANT, arming, claimed, disarm,
    id, lapse, now, owner, owner_of, started, step, task,
};
use crate::{
    Arm, CompletingClaim, Delivery, DeliveryKind, Error, LockedTask, Polled, Result, StepCommit,
    Store, TakenBy, TaskFailure, TaskFilter, TaskPoll, TaskRecord, TaskState, lock_expired,
};

/// The topic of [`task`] arms.
const TOPIC: &str = "debit-account";
const OTHER_TOPIC: &str = "credit-account";
const WORKER_A: &str = "worker-a";
const WORKER_B: &str = "worker-b";
/// The park every test's tasks wait on.
const PARK: ParkId = ParkId(1);

fn task_id(instance: &str) -> String {
    format!("{instance}:{PARK}")
}

/// A task on [`PARK`] of `topic`, with its own budget, backoff and lock.
fn task_of(topic: &str, retries: u32, backoff: SignedDuration, lock: SignedDuration) -> Arm {
    Arm::Task {
        park: PARK,
        topic: topic.to_owned(),
        input: json!({ "account": "a-1" }),
        retries,
        backoff,
        lock,
        taken_by: None,
    }
}

fn budgeted(retries: u32, backoff: SignedDuration, lock: SignedDuration) -> Arm {
    task_of(TOPIC, retries, backoff, lock)
}

fn on_other_topic() -> Arm {
    task_of(OTHER_TOPIC, 3, SignedDuration::from_secs(5), HOUR)
}

/// Starts instance `id` of `tenant` and commits a step arming `arm`.
async fn armed<S: Store>(store: &S, tenant: &str, id: &str, arm: Arm) {
    started(store, tenant, id).await;
    let claim = store.claim(tenant, id, &owner(LANE_A), HOUR).await.unwrap();
    store.commit(&arming(&claim, vec![arm])).await.unwrap();
}

fn poll(worker: &str, max: u32, lock: Option<SignedDuration>) -> TaskPoll {
    TaskPoll {
        tenant: TENANT.to_owned(),
        worker: worker.to_owned(),
        topics: vec![TOPIC.to_owned()],
        max,
        lock,
    }
}

async fn polled<S: Store>(store: &S, worker: &str, lock: SignedDuration) -> Vec<LockedTask> {
    store
        .poll_tasks(&poll(worker, 10, Some(lock)))
        .await
        .unwrap()
        .tasks
}

/// Polls for exactly one task.
async fn locked_one<S: Store>(store: &S, worker: &str, lock: SignedDuration) -> LockedTask {
    let tasks = polled(store, worker, lock).await;
    <[LockedTask; 1]>::try_from(tasks)
        .unwrap_or_else(|tasks| panic!("one task, not {tasks:?}"))
        .into_iter()
        .next()
        .expect("one task")
}

async fn record<S: Store>(store: &S, instance: &str) -> TaskRecord {
    let tasks = store.tasks(TENANT, instance).await.unwrap();
    <[TaskRecord; 1]>::try_from(tasks)
        .unwrap_or_else(|tasks| panic!("one task, not {tasks:?}"))
        .into_iter()
        .next()
        .expect("one task")
}

async fn due<S: Store>(store: &S) -> Vec<Delivery> {
    store.due_deliveries(100, REDELIVER_AT_ONCE).await.unwrap()
}

fn failure(retry: bool) -> TaskFailure {
    TaskFailure {
        error: TaskError {
            code: "BANK.DOWN".to_owned(),
            message: "the bank did not answer".to_owned(),
        },
        retry,
    }
}

#[track_caller]
fn assert_lock_lost<T: std::fmt::Debug>(result: Result<T>) {
    assert!(
        matches!(result, Err(Error::LockLost(_))),
        "expected a lost lock, got {result:?}"
    );
}

#[track_caller]
fn assert_not_found<T: std::fmt::Debug>(result: Result<T>) {
    assert!(
        matches!(result, Err(Error::TaskNotFound(_))),
        "expected no such task, got {result:?}"
    );
}

/// Checks that `at` is `duration` after some instant between `before` and `after`.
#[track_caller]
fn assert_after(at: Timestamp, duration: SignedDuration, before: Timestamp, after: Timestamp) {
    assert!(
        before + duration <= at && at <= after + duration,
        "{at} is not {duration:?} after [{before}, {after}]"
    );
}

/// The answer a worker's token gets for each of complete, fail, extend and release.
async fn every_answer<S: Store>(store: &S, tenant: &str, id: &str, token: &str) -> [Result<()>; 4] {
    [
        store.complete_task(tenant, id, token, &json!({})).await,
        store
            .fail_task(tenant, id, token, &failure(true))
            .await
            .map(drop),
        store.extend_task(tenant, id, token, HOUR).await.map(drop),
        store.release_task(tenant, id, token).await,
    ]
}

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
    let again = locked_one(store, WORKER_B, HOUR).await;
    assert_eq!((again.id.as_str(), again.attempt), (first.id.as_str(), 1));
    assert_ne!(again.lock_token, first.lock_token);
    // Asked only now: a refused answer's transaction may hold the row until its rollback
    // reaches the database, and a poll skips a row another transaction holds.
    assert_lock_lost(
        store
            .complete_task(TENANT, &first.id, &first.lock_token, &json!({}))
            .await,
    );
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
    let sorts = [ParkSort::Receive, ParkSort::Wait, ParkSort::Task];
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
            ParkSort::Receive | ParkSort::Wait => TaskState::Available,
        };
        assert_eq!(record(store, &instance).await.state, expected, "{sort:?}");
    }
}

pub async fn next_task_at_is_when_a_poll_could_next_take_one<S: Store>(store: &S) {
    let topics = [TOPIC.to_owned()];
    assert_eq!(store.next_task_at(TENANT, &topics).await.unwrap(), None);
    armed(store, TENANT, &id(1), task(PARK)).await;
    let available = record(store, &id(1)).await.available_at;
    assert!(available <= now());
    assert_eq!(
        store.next_task_at(TENANT, &topics).await.unwrap(),
        Some(available)
    );

    let lock = locked_one(store, WORKER_A, HOUR).await;

    assert_eq!(
        store.next_task_at(TENANT, &topics).await.unwrap(),
        Some(lock.lock_expires_at),
        "a locked task is available again when its lock expires"
    );
    assert_eq!(
        store
            .poll_tasks(&poll(WORKER_B, 10, Some(HOUR)))
            .await
            .unwrap(),
        Polled {
            tasks: vec![],
            next_at: Some(lock.lock_expires_at)
        },
        "a poll that locks nothing says when it could next lock one"
    );
    let other = [OTHER_TOPIC.to_owned()];
    assert_eq!(store.next_task_at(TENANT, &other).await.unwrap(), None);

    armed(store, TENANT, &id(2), task(PARK)).await;
    armed(store, TENANT, &id(3), task(PARK)).await;
    let full = store
        .poll_tasks(&poll(WORKER_B, 1, Some(HOUR)))
        .await
        .unwrap();
    assert_eq!(
        (full.tasks.len(), full.next_at),
        (1, None),
        "a poll that locked all it asked for leaves its next poll to look"
    );
    let short = store
        .poll_tasks(&poll(WORKER_B, 10, Some(HOUR)))
        .await
        .unwrap();
    assert_eq!(short.tasks.len(), 1);
    assert_eq!(
        short.next_at,
        Some(lock.lock_expires_at),
        "a poll that locked fewer than it asked for says when it could next lock one, \
         its own locks counted"
    );
}

pub async fn tasks_page_by_keyset_and_filter<S: Store>(store: &S) {
    for (n, arm) in [
        (1, task(PARK)),
        (2, on_other_topic()),
        (3, task(PARK)),
        (4, task(PARK)),
    ] {
        armed(store, TENANT, &id(n), arm).await;
    }
    store
        .poll_tasks(&poll(WORKER_A, 1, Some(HOUR)))
        .await
        .unwrap();
    let page = |filter: TaskFilter| async move {
        let records = store.list_tasks(TENANT, &filter).await.unwrap();
        records
            .into_iter()
            .map(|record| record.id)
            .collect::<Vec<_>>()
    };
    let ids = |ns: &[u32]| ns.iter().map(|n| task_id(&id(*n))).collect::<Vec<_>>();

    assert_eq!(page(TaskFilter::default()).await, ids(&[1, 2, 3, 4]));
    let topic = TaskFilter {
        topic: Some(OTHER_TOPIC.to_owned()),
        ..TaskFilter::default()
    };
    assert_eq!(page(topic).await, ids(&[2]));
    let available = TaskFilter {
        state: Some(TaskState::Available),
        topic: Some(TOPIC.to_owned()),
        ..TaskFilter::default()
    };
    assert_eq!(page(available).await, ids(&[3, 4]), "task 1 is locked");
    let first_page = TaskFilter {
        limit: 2,
        ..TaskFilter::default()
    };
    assert_eq!(page(first_page).await, ids(&[1, 2]));
    let next_page = TaskFilter {
        after: Some(task_id(&id(2))),
        limit: 2,
        ..TaskFilter::default()
    };
    assert_eq!(page(next_page).await, ids(&[3, 4]));
}

pub async fn tenants_never_see_each_others_tasks<S: Store>(store: &S) {
    let instance = id(1);
    armed(store, TENANT, &instance, task(PARK)).await;
    let theirs = TaskPoll {
        tenant: OTHER_TENANT.to_owned(),
        ..poll(WORKER_B, 10, Some(HOUR))
    };
    let topics = [TOPIC.to_owned()];

    assert_eq!(store.poll_tasks(&theirs).await.unwrap(), Polled::default());
    assert_eq!(
        store.next_task_at(OTHER_TENANT, &topics).await.unwrap(),
        None
    );
    let everything = TaskFilter::default();
    assert!(
        store
            .list_tasks(OTHER_TENANT, &everything)
            .await
            .unwrap()
            .is_empty()
    );

    let lock = locked_one(store, WORKER_A, HOUR).await;
    for answer in every_answer(store, OTHER_TENANT, &lock.id, &lock.lock_token).await {
        assert_not_found(answer);
    }
    assert_eq!(
        store.list_tasks(TENANT, &everything).await.unwrap().len(),
        1
    );
    assert_eq!(record(store, &instance).await.state, TaskState::Locked);
}
