//! Crash test of compensation (issue 34): the process dies right after the commit in which a
//! compensation handler completed and the next one was armed (fault point `after-compensated`),
//! before the worker hears back. The next process goes on from what was committed: every
//! handler runs exactly once. At one lane and at four (`<test>::lanes_1`, `<test>::lanes_4`).

mod common;

use std::time::Duration;

use common::incarnations::Incarnations;
use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, ServerOptions, at_lanes_1_and_4, serve};

const SAGA: &str = r#"
name: saga
channels:
  orders: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: reserve
        task: { topic: reserve }
        compensate-with: release
      - id: charge
        task: { topic: charge }
        compensate-with: refund
      - id: undo
        compensate: {}
      - id: done
        end: {}
      - id: release
        task: { topic: release }
      - id: refund
        task: { topic: refund }
"#;

fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database()).claim_timeout(Duration::from_secs(2))
}

/// Polls `topic` for its one task and completes it; a server that dies meanwhile answers
/// nothing.
async fn work(server: &Server, topic: &str) -> Value {
    let poll = json!({"worker": "w1", "topics": [topic], "max": 1, "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = tasks[0].clone();
    let id = task["id"].as_str().expect("a task id");
    let body = json!({"lock_token": task["lock_token"], "output": {}});
    let _ = server
        .try_post_json(&format!("/v1/tasks/{id}/complete"), &body)
        .await;
    task
}

at_lanes_1_and_4!(every_handler_runs_exactly_once_when_killed_between_two_handlers);

async fn every_handler_runs_exactly_once_when_killed_between_two_handlers(lanes: usize) {
    let scratch = Scratch::new("crash-compensation");
    let mut lives = Incarnations::new("crash-compensation", lanes);
    let dying = options(&scratch).fault("after-compensated");
    let server = lives.deployed(&dying, SAGA).await;
    let (status, body) = server.send("orders", "order-s1", json!({"id": "s1"})).await;
    assert_eq!(status, 202, "{body}");
    lives.accepted("order-s1", &body);
    let order = body["instance"].as_str().expect("an instance").to_owned();
    let server = lives.last();
    work(server, "reserve").await;
    work(server, "charge").await;
    // The newest completion first: the refund's commit arms the release, and the process dies.
    work(server, "refund").await;
    assert!(
        lives.last().wait_for_death(),
        "the handler's commit was never reached"
    );

    let server = lives.start(&options(&scratch));
    work(server, "release").await;
    server.wait_for_status(&order, "completed").await;
    let history = server.history(&order).await;
    let handlers: Vec<&str> = history
        .iter()
        .filter(|e| e["kind"] == "compensated")
        .filter_map(|e| e["node"].as_str())
        .collect();
    assert_eq!(
        handlers,
        ["refund", "release"],
        "each handler once: {history:#?}"
    );
    sutra_testkit::assert_audit_sequence_is_whole(&history);
    lives.assert_history_clean();
}
