//! Deadlines and reminders on a waiting node (issue 33, decision 0050), through the HTTP API of
//! a real `sutra serve`: on SQLite, and on PostgreSQL with two replicas (instances started on
//! one, their tasks polled and completed on the other, timers fired by whichever leads).
//!
//! - A deadline that fires first ends the wait: the task is withdrawn, the instance goes on at
//!   the deadline's `next`, and the worker's late completion is refused with the lock-lost code.
//! - A task completed before its deadline goes on as usual, and the deadline never fires.
//! - A reminder fires while the node waits, again at each `every`, running its own nodes beside
//!   the wait; the wait then resolves as usual and the reminders stop with it.

mod common;

use common::composition::{
    self, assert_lock_lost, complete, events, on_sqlite, on_two_postgres_replicas, poll,
};
use serde_json::{Value, json};
use sutra_testkit::{Server, until};

const APPROVALS: &str = r#"
name: approvals
channels:
  urgent: { transport: http, correlate: data.id }
  relaxed: { transport: http, correlate: data.id }
  nudged: { transport: http, correlate: data.id }
flows:
  urgent:
    start: { channel: urgent }
    nodes:
      - id: approve
        task: { topic: approve-urgent, input: { order: "= vars.input.id" } }
        output: decision
        deadline: { after: PT3S, next: escalate }
      - id: approved
        end: { reply: approved }
      - id: escalate
        set: { escalated: "= true" }
  relaxed:
    start: { channel: relaxed }
    nodes:
      - id: approve
        task: { topic: approve-relaxed, input: { order: "= vars.input.id" } }
        output: decision
        deadline: { after: P1D, next: escalate }
      - id: approved
        end: { reply: approved }
      - id: escalate
        end: { reply: escalated }
  nudged:
    start: { channel: nudged }
    nodes:
      - id: sign
        task: { topic: sign, input: { order: "= vars.input.id" } }
        output: signature
        remind:
          after: PT0.5S
          every: PT1S
          nodes:
            - id: nudge
              set: { nudged: "= true" }
      - id: signed
        end: { reply: "= vars.signature" }
"#;

/// Starts order `id` on `channel`.
async fn start(server: &Server, channel: &str, id: &str) -> String {
    composition::start(server, channel, id, json!({"id": id})).await
}

/// Long-polls `topic` on `server` for its one task.
async fn take(server: &Server, topic: &str) -> Value {
    let tasks = poll(server, topic, 1).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks[0].clone()
}

async fn a_deadline_withdraws_the_task_and_refuses_its_late_completion(a: &Server, b: &Server) {
    let instance = start(a, "urgent", "u1").await;
    let task = take(b, "approve-urgent").await;
    let escalated = a.wait_for_status(&instance, "completed").await;
    assert_eq!(escalated["vars"]["escalated"], true, "{escalated}");
    assert!(escalated["vars"].get("decision").is_none(), "{escalated}");

    assert_lock_lost(b, &task).await;
    let history = a.history(&instance).await;
    let fired = events(&history, "deadline_fired");
    assert_eq!(fired.len(), 1, "{history:#?}");
    assert_eq!(fired[0]["detail"]["next"], "escalate");
    assert!(
        events(&history, "task_completed").is_empty(),
        "{history:#?}"
    );
}

async fn a_task_done_before_its_deadline_goes_on_and_the_deadline_never_fires(
    a: &Server,
    b: &Server,
) {
    let instance = start(a, "relaxed", "r1").await;
    let task = take(b, "approve-relaxed").await;
    let (status, body) = complete(b, &task, json!({"ok": true})).await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&instance, "completed").await;
    assert_eq!(done["vars"]["decision"], json!({"ok": true}));
    let history = a.history(&instance).await;
    assert!(
        events(&history, "deadline_fired").is_empty(),
        "{history:#?}"
    );
}

async fn a_reminder_fires_while_the_task_waits_and_stops_when_it_is_done(a: &Server, b: &Server) {
    let instance = start(a, "nudged", "n1").await;
    let task = take(b, "sign").await;
    until("two reminders", async || {
        events(&a.history(&instance).await, "reminded").len() >= 2
    })
    .await;
    let waiting = a.instance(&instance).await;
    assert_eq!(
        waiting["status"], "suspended",
        "the reminders did not end the wait"
    );
    assert_eq!(waiting["vars"]["nudged"], true, "{waiting}");

    let (status, body) = complete(b, &task, json!("signed")).await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&instance, "completed").await;
    assert_eq!(done["vars"]["signature"], "signed");
    let history = a.history(&instance).await;
    let fired: Vec<u64> = events(&history, "reminded")
        .iter()
        .filter_map(|e| e["detail"]["fired"].as_u64())
        .collect();
    let counted: Vec<u64> = (1..=fired.len() as u64).collect();
    assert_eq!(fired, counted, "each reminder counts from 1: {history:#?}");
    let nudges = history
        .iter()
        .filter(|e| e["kind"] == "variables_set" && e["node"] == "nudge")
        .count();
    assert_eq!(nudges, fired.len(), "each reminder ran its nodes once");
}

async fn every_rule(a: &Server, b: &Server) {
    a_deadline_withdraws_the_task_and_refuses_its_late_completion(a, b).await;
    a_task_done_before_its_deadline_goes_on_and_the_deadline_never_fires(a, b).await;
    a_reminder_fires_while_the_task_waits_and_stops_when_it_is_done(a, b).await;
}

#[tokio::test]
async fn deadlines_and_reminders_on_sqlite() {
    let (_scratch, server) = on_sqlite("composition-timers", APPROVALS).await;
    every_rule(&server, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deadlines_and_reminders_on_postgres_with_two_replicas() {
    let (_database, fleet) = on_two_postgres_replicas("composition-timers", APPROVALS).await;
    every_rule(fleet.replica(0), fleet.replica(1)).await;
}
