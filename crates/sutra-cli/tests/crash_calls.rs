//! Crash test of calls (issue 33): the process dies between a called instance's final commit,
//! which wrote its report to its caller, and the caller's step that takes the report. The
//! report is a durable delivery (SPEC §5.6): the next process takes it, and the caller resumes
//! exactly once. At one lane and at four (`<test>::lanes_1`, `<test>::lanes_4`).

mod common;

use std::time::Duration;

use common::incarnations::Incarnations;
use serde_json::json;
use sutra_testkit::{Scratch, ServerOptions, at_lanes_1_and_4, serve};

const CLAIM_TIMEOUT: Duration = Duration::from_secs(2);

const ORDERS: &str = r#"
name: orders
channels:
  orders: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: "= vars.input.id" } }
        output: shipment
      - id: shipped
        end: { reply: "= vars.shipment" }
  shipping:
    nodes:
      - id: book
        task: { topic: book-carrier, input: { order: "= vars.input.order" } }
        output: booking
      - id: booked
        end: { reply: "= vars.booking" }
"#;

fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database()).claim_timeout(CLAIM_TIMEOUT)
}

at_lanes_1_and_4!(a_caller_resumes_exactly_once_when_killed_after_its_childs_end);

async fn a_caller_resumes_exactly_once_when_killed_after_its_childs_end(lanes: usize) {
    let scratch = Scratch::new("crash-calls");
    let mut lives = Incarnations::new("crash-calls", lanes);
    let dying = options(&scratch).fault("child-ended");
    let server = lives.deployed(&dying, ORDERS).await;
    let (status, body) = server.send("orders", "order-c1", json!({"id": "c1"})).await;
    assert_eq!(status, 202, "{body}");
    lives.accepted("order-c1", &body);
    let order = body["instance"].as_str().expect("an instance").to_owned();

    let server = lives.last();
    let poll = json!({"worker": "w1", "topics": ["book-carrier"], "max": 1, "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = &tasks[0];
    let id = task["id"].as_str().expect("a task id");
    let completion = json!({"lock_token": task["lock_token"], "output": "DHL-1"});
    // The child's final step commits; the process dies as it takes the report, whether or not
    // the worker heard back.
    let _ = server
        .try_post_json(&format!("/v1/tasks/{id}/complete"), &completion)
        .await;
    assert!(lives.last().wait_for_death(), "the report was never taken");

    let server = lives.start(&options(&scratch));
    let done = server.wait_for_status(&order, "completed").await;
    assert_eq!(done["vars"]["shipment"], "DHL-1", "{done}");
    let history = server.history(&order).await;
    let ended = history
        .iter()
        .filter(|e| e["kind"] == "child_ended")
        .count();
    assert_eq!(
        ended, 1,
        "the caller took its child's end once: {history:#?}"
    );
    sutra_testkit::assert_audit_sequence_is_whole(&history);
    lives.assert_history_clean();
}
