//! Crash test of the pull surface: a real `sutra serve` killed with SIGKILL inside a task
//! completion — after the store recorded it, before the worker heard back — then restarted on
//! the same database file; each at one lane and at four (`<test>::lanes_1`, `<test>::lanes_4`).
//!
//! The completion and its delivery were one transaction, so after the restart `recover` takes
//! the delivery and the instance advances exactly once; the worker, never having heard back,
//! retries with the same token and is told its lock is gone instead of advancing it again. The
//! history both processes recorded passes the history checker (`common::history`, decision
//! 0043).

mod common;

use std::time::Duration;

use common::incarnations::Incarnations;
use serde_json::{Value, json};
use sutra_testkit::{
    Scratch, Server, ServerOptions, assert_audit_sequence_is_whole, at_lanes_1_and_4, count_kind,
    event, serve,
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

at_lanes_1_and_4!(
    a_completion_killed_before_its_reply_is_taken_exactly_once,
    a_task_locked_for_a_worker_that_never_heard_is_retaken_when_its_lock_lapses,
    a_task_handed_to_a_poll_that_never_heard_is_retaken_when_its_lock_lapses,
);

/// A delivery handed out to a dead process is due again in seconds.
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

/// Starts a transfer on the process up, recording the answer for the history checker; its
/// instance's id.
async fn started(lives: &mut Incarnations) -> String {
    let (status, body) = (lives.last())
        .send("transfers", "t-1", json!({"id": "t1"}))
        .await;
    assert_eq!(status, 202, "{body}");
    lives.accepted("t-1", &body);
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

async fn a_completion_killed_before_its_reply_is_taken_exactly_once(lanes: usize) {
    let scratch = Scratch::new("after-task-complete");
    let mut lives = Incarnations::new("after-task-complete", lanes);
    (lives.deployed(&options(&scratch).fault("after-task-complete"), FLOWS)).await;
    let instance = started(&mut lives).await;
    let server = lives.last();
    let debit = poll_one(server, "debit").await;
    let (path, body) = completion(&debit);

    let answer = server.try_post_json(&path, &body).await;
    assert_killed_by_its_fault(server, answer);

    let server = lives.start(&options(&scratch));
    let (status, retried) = server.post_json(&path, &body).await;
    assert_eq!(
        (status, retried["code"].as_str()),
        (409, Some("SUTRA.TASK.LOCK.LOST")),
        "{retried}"
    );
    let advanced = server.wait_for_node(&instance, "credit").await;
    assert_eq!(advanced["vars"]["debit"], json!({"debited": true}));
    let credit = poll_one(server, "credit").await;
    completes_once(server, &instance, &credit).await;
    lives.assert_history_clean();
}

/// Eager dispatch (decision 0038): a completion that asked for its worker's next task, killed
/// after the commit that completed the debit and locked the credit for the worker, before the
/// answer. The worker never learns of the credit task: it is held only until its lock lapses,
/// then another worker takes it on its next attempt, and each task is completed once.
async fn a_task_locked_for_a_worker_that_never_heard_is_retaken_when_its_lock_lapses(lanes: usize) {
    let scratch = Scratch::new("after-task-complete-take");
    let mut lives = Incarnations::new("after-task-complete-take", lanes);
    (lives.deployed(&options(&scratch).fault("after-task-complete"), FLOWS)).await;
    let instance = started(&mut lives).await;
    let server = lives.last();
    let debit = poll_one(server, "debit").await;
    let take = json!({"worker": "w1", "topics": ["credit"], "lock": "PT1S"});
    let batch = json!([{
        "id": debit["id"], "lock_token": debit["lock_token"], "output": {"debited": true},
        "take": take,
    }]);

    let answer = server.try_post_json("/v1/tasks/complete", &batch).await;
    assert_killed_by_its_fault(server, answer);

    let server = lives.start(&options(&scratch));
    let credit = poll_one(server, "credit").await;
    assert_eq!(
        (&credit["instance"], &credit["attempt"]),
        (&json!(instance), &json!(2)),
        "the lapsed lock was the task's first attempt: {credit}"
    );
    completes_once(server, &instance, &credit).await;
    lives.assert_history_clean();
}

/// A task handed to a waiting poll (decision 0039), the replica killed after the start that
/// armed it — locked for that poll's worker in the start's own transaction — committed, and
/// before the poll heard. The task is held only until that lock lapses, then the next poll takes
/// it on its second attempt, and it is completed once.
async fn a_task_handed_to_a_poll_that_never_heard_is_retaken_when_its_lock_lapses(lanes: usize) {
    let scratch = Scratch::new("after-start-commit-handoff");
    let mut lives = Incarnations::new("after-start-commit-handoff", lanes);
    let server = (lives.deployed(&options(&scratch).fault("after-start-commit"), FLOWS)).await;
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
    assert_killed_by_its_fault(server, sent);

    let server = lives.start(&options(&scratch));
    let debit = poll_one(server, "debit").await;
    assert_eq!(
        debit["attempt"], 2,
        "the lapsed lock was the task's first attempt: {debit}"
    );
    let instance = debit["instance"].as_str().unwrap().to_owned();
    let (path, body) = completion(&debit);
    assert_eq!(server.post_json(&path, &body).await.0, 200);
    let credit = poll_one(server, "credit").await;
    completes_once(server, &instance, &credit).await;
    lives.assert_history_clean();
}
