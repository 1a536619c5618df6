//! End-to-end: `sutra.tasks.max-lock`, the ceiling on a task's lock (issue 48, decision 0078),
//! on a real `sutra serve` over SQLite and PostgreSQL.
//!
//! A lock asked past the ceiling is granted up to it, never refused (the OpenAPI document takes
//! any positive duration, decision 0062): a poll's `lock`, an extension's, a completion's
//! `take.lock`, and a task node's own `lock` when the worker asks for none, whether the task is
//! found by the poll or handed to it as it waits. A lock within the ceiling is granted as asked.
//! Every answer's `lock_expires_at` is the lock the worker got.
//!
//! The ceiling is ten minutes and the lock within it one, so that no lock lapses while the test
//! runs however slow the machine: each expiry is checked against the instants just before the
//! request and just after its answer, which a slow machine only moves apart.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve};

const FLOWS: &str = r#"
name: ceiling
channels:
  jobs: { transport: http, correlate: data.id }
flows:
  job:
    start: { channel: jobs }
    nodes:
      - id: first
        task: { topic: first, input: { id: "= vars.input.id" }, lock: P30D }
      - id: second
        task: { topic: second, input: { id: "= vars.input.id" }, lock: P30D }
      - id: third
        task: { topic: third, input: { id: "= vars.input.id" } }
      - id: done
        end: { reply: { ok: true } }
"#;

/// `sutra.tasks.max-lock` as the servers here run with it.
const CEILING: SignedDuration = SignedDuration::from_mins(10);
/// Ten thousand years: what issue 48 was granted.
const CENTURIES: &str = "P3650000D";
/// A lock within the ceiling, as asked.
const WITHIN: &str = "PT1M";
/// The task node's own lock when it declares none (`third`).
const TASK_DEFAULT: SignedDuration = SignedDuration::from_mins(5);

async fn start_job(server: &Server, id: &str) {
    let (status, body) = server
        .send("jobs", &format!("job-{id}"), json!({"id": id}))
        .await;
    assert_eq!(status, 202, "{body}");
}

/// What a request answered, between the instants just before it was sent and just after.
struct Timed {
    answer: Value,
    sent: Timestamp,
    answered: Timestamp,
}

impl Timed {
    /// The answer's `lock_expires_at` is `granted` from some moment the request was in flight
    /// (a second's slack either side for the clocks' rounding).
    #[track_caller]
    fn assert_granted(&self, granted: SignedDuration) {
        let expires: Timestamp = self.answer["lock_expires_at"]
            .as_str()
            .and_then(|at| at.parse().ok())
            .unwrap_or_else(|| panic!("an answer with a lock_expires_at: {}", self.answer));
        let slack = SignedDuration::from_secs(1);
        let earliest = self.sent + granted - slack;
        let latest = self.answered + granted + slack;
        assert!(
            earliest <= expires && expires <= latest,
            "a lock of {granted:#} asked between {} and {} expires at {expires}: {}",
            self.sent,
            self.answered,
            self.answer
        );
    }
}

async fn timed(request: impl Future<Output = Value>) -> Timed {
    let sent = Timestamp::now();
    let answer = request.await;
    Timed {
        answer,
        sent,
        answered: Timestamp::now(),
    }
}

/// Long-polls `topic` for exactly one task, asking for `lock` (the task's own when `None`).
async fn poll_one(server: &Server, topic: &str, lock: Option<&str>) -> Value {
    let mut body = json!({"worker": "w1", "topics": [topic], "wait": "PT30S"});
    if let Some(lock) = lock {
        body["lock"] = json!(lock);
    }
    let (status, tasks) = server.post_json("/v1/tasks/poll", &body).await;
    assert_eq!(status, 200, "{tasks}");
    let tasks = tasks.as_array().cloned().expect("poll answers an array");
    assert_eq!(tasks.len(), 1, "one task, not {tasks:?}");
    tasks[0].clone()
}

async fn extend(server: &Server, task: &Value, lock: &str) -> Value {
    let id = task["id"].as_str().expect("a task id");
    let body = json!({"lock_token": task["lock_token"], "lock": lock});
    let (status, extended) = server
        .post_json(&format!("/v1/tasks/{id}/extend"), &body)
        .await;
    assert_eq!(status, 200, "{extended}");
    assert_eq!(extended["id"], task["id"], "{extended}");
    extended
}

/// Completes `task` in a batch of one, asking for the worker's next task of `topic` with `lock`
/// (the task's own when `None`); returns the task taken.
async fn complete_taking(server: &Server, task: &Value, topic: &str, lock: Option<&str>) -> Value {
    let mut take = json!({"worker": "w1", "topics": [topic]});
    if let Some(lock) = lock {
        take["lock"] = json!(lock);
    }
    let item =
        json!({"id": task["id"], "lock_token": task["lock_token"], "output": {}, "take": take});
    let (status, batch) = server.post_json("/v1/tasks/complete", &json!([item])).await;
    assert_eq!(status, 200, "{batch}");
    let result = &batch["items"][0];
    assert_eq!(result["state"], "completed", "{batch}");
    assert_eq!(result["taken"]["topic"], topic, "{batch}");
    result["taken"].clone()
}

async fn complete(server: &Server, task: &Value) {
    let id = task["id"].as_str().expect("a task id");
    let body = json!({"lock_token": task["lock_token"], "output": {}});
    let (status, done) = server
        .post_json(&format!("/v1/tasks/{id}/complete"), &body)
        .await;
    assert_eq!(status, 200, "{done}");
}

/// Every way a worker asks for a lock, past the ceiling and within it.
async fn locks_are_granted_up_to_the_ceiling(server: &Server) {
    // Asked for: a poll's, an extension's and a take's lock past the ceiling get the ceiling.
    start_job(server, "asked").await;
    let polled = timed(poll_one(server, "first", Some(CENTURIES))).await;
    polled.assert_granted(CEILING);
    let first = polled.answer;
    timed(extend(server, &first, CENTURIES))
        .await
        .assert_granted(CEILING);
    timed(extend(server, &first, WITHIN))
        .await
        .assert_granted(SignedDuration::from_mins(1));
    let taken = timed(complete_taking(server, &first, "second", Some(CENTURIES))).await;
    taken.assert_granted(CEILING);
    complete(server, &taken.answer).await;
    let within = timed(poll_one(server, "third", Some(WITHIN))).await;
    within.assert_granted(SignedDuration::from_mins(1));
    complete(server, &within.answer).await;

    // Not asked for: the task's own lock (`P30D`) gets the ceiling; one within it, its own.
    start_job(server, "own").await;
    let polled = timed(poll_one(server, "first", None)).await;
    polled.assert_granted(CEILING);
    let taken = timed(complete_taking(server, &polled.answer, "second", None)).await;
    taken.assert_granted(CEILING);
    complete(server, &taken.answer).await;
    let own = timed(poll_one(server, "third", None)).await;
    own.assert_granted(TASK_DEFAULT);
    complete(server, &own.answer).await;

    // A poll already waiting as the task is armed, which may be handed the task as the step
    // commits (decision 0039): the ceiling too, asked for or not.
    for (id, lock) in [("handed-asked", Some(CENTURIES)), ("handed-own", None)] {
        let waiting = timed(poll_one(server, "first", lock));
        let start = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            start_job(server, id).await;
        };
        let (handed, ()) = tokio::join!(waiting, start);
        handed.assert_granted(CEILING);
    }
}

#[tokio::test]
async fn locks_are_granted_up_to_the_ceiling_on_sqlite() {
    let scratch = Scratch::new("tasks-lock-ceiling");
    let server = serve!(scratch.database())
        .env("SUTRA_TASKS_MAX_LOCK", "PT10M")
        .deployed(FLOWS)
        .await;
    locks_are_granted_up_to_the_ceiling(&server).await;
}

#[tokio::test]
async fn locks_are_granted_up_to_the_ceiling_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url())
        .env("SUTRA_TASKS_MAX_LOCK", "PT10M")
        .deployed(FLOWS)
        .await;
    locks_are_granted_up_to_the_ceiling(&server).await;
}
