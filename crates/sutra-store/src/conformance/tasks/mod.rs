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
    Arm, ClaimAhead, CompletingClaim, Delivery, DeliveryKind, Error, LockedTask, Polled, Result,
    StepCommit, Store, TakenBy, TaskFailure, TaskFilter, TaskPoll, TaskRecord, TaskState,
    lock_expired,
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

mod locks;
mod outcomes;

pub use locks::*;
pub use outcomes::*;

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
