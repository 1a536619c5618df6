//! Error scopes (issue 34, `docs/design/time-and-undo.md` §3), through the HTTP API of a real
//! `sutra serve`: on SQLite, and on PostgreSQL with two replicas.
//!
//! - A failure in one branch of a `parallel` inside a scope goes to the scope's `on-error`, and
//!   the other branch's task is withdrawn in the same step (its late completion is refused).
//! - Scopes nest: the innermost with an `on-error` catches.
//! - A scope's deadline ends its block: the child a call inside waits for is cancelled.

mod common;

use common::composition::{
    self, assert_lock_lost, complete, events, fail, on_sqlite, on_two_postgres_replicas, poll,
};
use serde_json::{Value, json};
use sutra_testkit::Server;

const TRANSFERS: &str = r#"
name: transfers
channels:
  transfers: { transport: http, correlate: data.id }
  nested: { transport: http, correlate: data.id }
  bounded: { transport: http, correlate: data.id }
flows:
  transfer:
    start: { channel: transfers }
    nodes:
      - id: payment
        scope:
          nodes:
            - id: both
              parallel:
                - - id: debit
                    task: { topic: scope-debit, input: "= vars.input.id" }
                - - id: credit
                    task: { topic: scope-credit, input: "= vars.input.id" }
        on-error: undo
      - id: done
        end: { reply: done }
      - id: undo
        end: { reply: "= vars.error" }
  nested:
    start: { channel: nested }
    nodes:
      - id: outer
        scope:
          nodes:
            - id: inner
              scope:
                nodes:
                  - id: work
                    task: { topic: scope-work, input: "= vars.input.id" }
              on-error: inner-caught
            - id: after-inner
              end: { reply: "= vars.caught" }
            - id: inner-caught
              set: { caught: inner }
              next: after-inner
        on-error: outer-caught
      - id: outer-caught
        end: { reply: outer }
  bounded:
    start: { channel: bounded }
    nodes:
      - id: shipping
        scope:
          nodes:
            - id: ship
              call: { flow: carrier }
        deadline: { after: PT2S, next: late }
      - id: done
        end: { reply: shipped }
      - id: late
        end: { reply: late }
  carrier:
    nodes:
      - id: book
        task: { topic: scope-book, input: "= vars.input" }
"#;

async fn start(server: &Server, channel: &str, id: &str) -> String {
    composition::start(server, channel, id, json!({"id": id})).await
}

/// Long-polls `topic` for its one task.
async fn take(server: &Server, topic: &str) -> Value {
    let tasks = poll(server, topic, 1).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks[0].clone()
}

async fn a_failed_branch_withdraws_its_sibling_and_goes_to_the_scopes_on_error(
    a: &Server,
    b: &Server,
) {
    let transfer = start(a, "transfers", "t1").await;
    let debit = take(b, "scope-debit").await;
    let credit = take(b, "scope-credit").await;
    let (status, body) = fail(b, &debit, "NO.FUNDS").await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&transfer, "completed").await;
    assert_eq!(done["vars"]["error"]["code"], "NO.FUNDS", "{done}");
    assert_eq!(done["vars"]["error"]["node"], "debit", "{done}");
    assert_lock_lost(b, &credit).await;
    let history = a.history(&transfer).await;
    let caught = events(&history, "error_caught");
    assert_eq!(caught.len(), 1, "{history:#?}");
    assert_eq!(caught[0]["node"], "payment");
    assert!(events(&history, "failed").is_empty(), "{history:#?}");
}

async fn the_innermost_scope_with_a_handler_catches(a: &Server, b: &Server) {
    let nested = start(a, "nested", "n1").await;
    let work = take(b, "scope-work").await;
    let (status, body) = fail(b, &work, "BROKEN").await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&nested, "completed").await;
    assert_eq!(done["vars"]["caught"], "inner", "{done}");
    let caught = events(&a.history(&nested).await, "error_caught");
    assert_eq!(caught.len(), 1);
    assert_eq!(caught[0]["node"], "inner");
}

async fn a_scopes_deadline_cancels_the_child_inside(a: &Server, b: &Server) {
    let bounded = start(a, "bounded", "b1").await;
    let book = take(b, "scope-book").await;
    let done = a.wait_for_status(&bounded, "completed").await;
    assert_eq!(done["vars"].get("error"), None, "{done}");
    let child = events(&a.history(&bounded).await, "called")[0]["detail"]["child"]
        .as_str()
        .expect("a child")
        .to_owned();
    a.wait_for_status(&child, "cancelled").await;
    let (status, answer) = complete(b, &book, json!("too late")).await;
    assert_eq!(status, 409, "the child's task was withdrawn: {answer}");
}

async fn every_rule(a: &Server, b: &Server) {
    a_failed_branch_withdraws_its_sibling_and_goes_to_the_scopes_on_error(a, b).await;
    the_innermost_scope_with_a_handler_catches(a, b).await;
    a_scopes_deadline_cancels_the_child_inside(a, b).await;
}

#[tokio::test]
async fn scopes_on_sqlite() {
    let (_scratch, server) = on_sqlite("error-scopes", TRANSFERS).await;
    every_rule(&server, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scopes_on_postgres_with_two_replicas() {
    let (_database, fleet) = on_two_postgres_replicas("error-scopes", TRANSFERS).await;
    every_rule(fleet.replica(0), fleet.replica(1)).await;
}
