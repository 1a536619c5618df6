//! Crash test of the pull surface: a real `sutra serve` killed with SIGKILL inside a task
//! completion — after the store recorded it, before the worker heard back — then restarted on
//! the same database file.
//!
//! The completion and its delivery were one transaction, so after the restart `recover` takes
//! the delivery and the instance advances exactly once; the worker, never having heard back,
//! retries with the same token and is told its lock is gone instead of advancing it again.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::{
    Scratch, Server, ServerOptions, assert_audit_sequence_is_whole, count_kind, event, serve,
};

const FLOWS: &str = r#"
name: crash-tasks
channels:
  transfers:
    transport: http
    correlate: data.id
flows:
  transfer:
    start: { channel: transfers }
    nodes:
      - id: debit
        task: { topic: debit, input: { id: "= vars.input.id" } }
        output: debit
      - id: credit
        task: { topic: credit, input: { id: "= vars.input.id" } }
        output: credit
"#;

/// A dead holder's claim is swept in seconds.
fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database())
        .claim_timeout(Duration::from_secs(1))
        .sweep_interval(Duration::from_millis(500))
}

async fn poll_one(server: &Server, topic: &str) -> Value {
    let body = json!({"worker": "w1", "topics": [topic], "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &body).await;
    assert_eq!(status, 200, "{tasks}");
    assert_eq!(tasks.as_array().map(Vec::len), Some(1), "{tasks}");
    tasks[0].clone()
}

fn completion(task: &Value) -> (String, Value) {
    let path = format!("/v1/tasks/{}/complete", task["id"].as_str().unwrap());
    let body = json!({"lock_token": task["lock_token"], "output": {"debited": true}});
    (path, body)
}

/// Starts a transfer; its instance's id.
async fn started(server: &Server) -> String {
    let (status, body) = server.send("transfers", "t-1", json!({"id": "t1"})).await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// The request in flight was not answered, and the server died of its fault.
fn assert_killed_by_its_fault(server: &mut Server, answer: Option<(u16, Value)>) {
    assert!(
        answer.is_none(),
        "the fault point was not reached: {answer:?}"
    );
    assert!(
        server.wait_for_death(),
        "the server was not killed by a signal"
    );
}

/// Completes `task`, then `instance` ends with each of its two tasks completed once.
async fn completes_once(server: &Server, instance: &str, task: &Value) {
    let (path, body) = completion(task);
    assert_eq!(server.post_json(&path, &body).await.0, 200);
    server.wait_for_status(instance, "completed").await;
    let history = server.history(instance).await;
    assert_audit_sequence_is_whole(&history);
    let completions = count_kind(&history, "task_completed");
    assert_eq!(completions, 2, "debit and credit, once each: {history:?}");
}

#[tokio::test]
async fn a_completion_killed_before_its_reply_is_taken_exactly_once() {
    let scratch = Scratch::new("after-task-complete");
    let mut server = options(&scratch)
        .fault("after-task-complete")
        .deployed(FLOWS)
        .await;
    let instance = started(&server).await;
    let debit = poll_one(&server, "debit").await;
    let (path, body) = completion(&debit);

    let answer = server.try_post_json(&path, &body).await;
    assert_killed_by_its_fault(&mut server, answer);

    let server = Server::start(&options(&scratch));
    let (status, retried) = server.post_json(&path, &body).await;
    assert_eq!(
        (status, retried["code"].as_str()),
        (409, Some("SUTRA.TASK.LOCK.LOST")),
        "{retried}"
    );
    let advanced = server.wait_for_node(&instance, "credit").await;
    assert_eq!(advanced["vars"]["debit"], json!({"debited": true}));
    let credit = poll_one(&server, "credit").await;
    completes_once(&server, &instance, &credit).await;
}

/// Eager dispatch (decision 0038): a completion that asked for its worker's next task, killed
/// after the commit that completed the debit and locked the credit for the worker, before the
/// answer. The worker never learns of the credit task: it is held only until its lock lapses,
/// then another worker takes it on its next attempt, and each task is completed once.
#[tokio::test]
async fn a_task_locked_for_a_worker_that_never_heard_is_retaken_when_its_lock_lapses() {
    let scratch = Scratch::new("after-task-complete-take");
    let mut server = options(&scratch)
        .fault("after-task-complete")
        .deployed(FLOWS)
        .await;
    let instance = started(&server).await;
    let debit = poll_one(&server, "debit").await;
    let take = json!({"worker": "w1", "topics": ["credit"], "lock": "PT1S"});
    let batch = json!([{
        "id": debit["id"], "lock_token": debit["lock_token"], "output": {"debited": true},
        "take": take,
    }]);

    let answer = server.try_post_json("/v1/tasks/complete", &batch).await;
    assert_killed_by_its_fault(&mut server, answer);

    let server = Server::start(&options(&scratch));
    let credit = poll_one(&server, "credit").await;
    assert_eq!(
        (&credit["instance"], &credit["attempt"]),
        (&json!(instance), &json!(2)),
        "the lapsed lock was the task's first attempt: {credit}"
    );
    completes_once(&server, &instance, &credit).await;
}

/// A task handed to a waiting poll (decision 0039), the replica killed after the start that
/// armed it — locked for that poll's worker in the start's own transaction — committed, and
/// before the poll heard. The task is held only until that lock lapses, then the next poll takes
/// it on its second attempt, and it is completed once.
#[tokio::test]
async fn a_task_handed_to_a_poll_that_never_heard_is_retaken_when_its_lock_lapses() {
    let scratch = Scratch::new("after-start-commit-handoff");
    let mut server = options(&scratch)
        .fault("after-start-commit")
        .deployed(FLOWS)
        .await;
    let poll = json!({"worker": "w1", "topics": ["debit"], "wait": "PT30S", "lock": "PT1S"});
    let waiting = server.try_post_json("/v1/tasks/poll", &poll);
    let start = async {
        while server.metric("sutra_task_polls_waiting").await != Some(1.0) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let message = event("t-1", json!({"id": "t1"})).to_string();
        server
            .try_post_raw("/v1/channels/transfers/messages", message)
            .await
    };

    let (polled, sent) = tokio::join!(waiting, start);
    assert_eq!(polled, None, "the poll was answered: {polled:?}");
    assert_killed_by_its_fault(&mut server, sent);

    let server = Server::start(&options(&scratch));
    let debit = poll_one(&server, "debit").await;
    assert_eq!(
        debit["attempt"], 2,
        "the lapsed lock was the task's first attempt: {debit}"
    );
    let instance = debit["instance"].as_str().unwrap().to_owned();
    let (path, body) = completion(&debit);
    assert_eq!(server.post_json(&path, &body).await.0, 200);
    let credit = poll_one(&server, "credit").await;
    completes_once(&server, &instance, &credit).await;
}
