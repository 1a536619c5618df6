//! Compensation (issue 34, `docs/design/time-and-undo.md` §4), through the HTTP API of a real
//! `sutra serve`: on SQLite, and on PostgreSQL with two replicas.
//!
//! - A saga: a failure inside a scope goes to `on-error`, whose `compensate` runs the handler of
//!   what completed inside the scope, then the instance fails as the flow says.
//! - A node completed three times in a loop is compensated three times, newest first.
//! - A handler that fails fails the instance with `SUTRA.RUNTIME.COMPENSATION.FAILED`; repaired
//!   by a migration and restored, it runs again, and only the handlers not yet run follow.

mod common;

use common::composition::{
    self, complete, events, fail, on_sqlite, on_two_postgres_replicas, poll,
};
use serde_json::{Value, json};
use sutra_testkit::Server;

fn sagas(release_topic: &str) -> String {
    format!(
        r#"
name: sagas
channels:
  transfers: {{ transport: http, correlate: data.id }}
  loops: {{ transport: http, correlate: data.id }}
flows:
  transfer:
    start: {{ channel: transfers }}
    nodes:
      - id: payment
        scope:
          nodes:
            - id: debit
              task: {{ topic: saga-debit, input: "= vars.input.id" }}
              output: debit
              compensate-with: refund-debit
            - id: credit
              task: {{ topic: saga-credit, input: "= vars.input.id" }}
        on-error: undo
      - id: done
        end: {{ reply: done }}
      - id: undo
        compensate: {{ scope: payment }}
        next: failed
      - id: failed
        fail: {{ code: TRANSFER.FAILED, detail: "= vars.error.message" }}
      - id: refund-debit
        task: {{ topic: saga-refund, input: "= vars.debit" }}
  loops:
    start: {{ channel: loops }}
    nodes:
      - id: count
        set: {{ n: 0 }}
      - id: reserve
        task: {{ topic: saga-reserve, input: "= vars.n" }}
        compensate-with: release
      - id: again
        set: {{ n: "= vars.n + 1" }}
      - id: more
        choice:
          - when: vars.n < 3
            next: reserve
        otherwise: undo
      - id: undo
        compensate: {{}}
      - id: done
        end: {{ reply: "= vars.n" }}
      - id: release
        task: {{ topic: {release_topic}, input: "= vars.n" }}
"#
    )
}

async fn start(server: &Server, channel: &str, id: &str) -> String {
    composition::start(server, channel, id, json!({"id": id})).await
}

/// Long-polls `topic` for its one task.
async fn take(server: &Server, topic: &str) -> Value {
    let tasks = poll(server, topic, 1).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks[0].clone()
}

async fn done(server: &Server, task: &Value) {
    let (status, body) = complete(server, task, json!({"ok": task["input"]})).await;
    assert_eq!(status, 200, "{body}");
}

/// The completions each `compensated` event of an instance's history undid, in order.
fn undone(history: &[Value]) -> Vec<Value> {
    events(history, "compensated")
        .iter()
        .map(|e| e["detail"]["entry"].clone())
        .collect()
}

async fn a_failure_in_the_scope_runs_the_refund_and_fails_as_the_flow_says(a: &Server, b: &Server) {
    let transfer = start(a, "transfers", "t1").await;
    done(b, &take(b, "saga-debit").await).await;
    let credit = take(b, "saga-credit").await;
    let (status, body) = fail(b, &credit, "NO.ACCOUNT").await;
    assert_eq!(status, 200, "{body}");
    let refund = take(b, "saga-refund").await;
    assert_eq!(
        refund["input"],
        json!({"ok": "t1"}),
        "the handler sees the debit's output"
    );
    done(b, &refund).await;
    let failed = a.wait_for_status(&transfer, "failed").await;
    assert_eq!(failed["failure"]["code"], "TRANSFER.FAILED", "{failed}");
    let history = a.history(&transfer).await;
    assert_eq!(undone(&history), [json!(0)], "{history:#?}");
    assert_eq!(events(&history, "compensated")[0]["node"], "refund-debit");
}

async fn a_loops_three_completions_are_undone_newest_first(a: &Server, b: &Server) {
    let looped = start(a, "loops", "l1").await;
    for _ in 0..3 {
        done(b, &take(b, "saga-reserve").await).await;
    }
    for _ in 0..3 {
        done(b, &take(b, "saga-release").await).await;
    }
    let finished = a.wait_for_status(&looped, "completed").await;
    assert_eq!(finished["vars"]["n"], 3);
    let history = a.history(&looped).await;
    assert_eq!(
        undone(&history),
        [json!(2), json!(1), json!(0)],
        "{history:#?}"
    );
}

#[tokio::test]
async fn compensation_on_sqlite() {
    let (_scratch, server) = on_sqlite("compensation", &sagas("saga-release")).await;
    a_failure_in_the_scope_runs_the_refund_and_fails_as_the_flow_says(&server, &server).await;
    a_loops_three_completions_are_undone_newest_first(&server, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compensation_on_postgres_with_two_replicas() {
    let (_database, fleet) = on_two_postgres_replicas("compensation", &sagas("saga-release")).await;
    let (a, b) = (fleet.replica(0), fleet.replica(1));
    a_failure_in_the_scope_runs_the_refund_and_fails_as_the_flow_says(a, b).await;
    a_loops_three_completions_are_undone_newest_first(a, b).await;
}

/// Version 1's handler fails; version 2 sends it to another topic. Migrated and restored, the
/// failed handler runs on version 2, and only the completion not yet undone follows it.
#[tokio::test]
async fn a_failed_handler_is_repaired_by_migration_and_restore_runs_only_what_is_left() {
    let (_scratch, server) = on_sqlite("compensation-repair", &sagas("saga-release")).await;
    let looped = start(&server, "loops", "r1").await;
    for _ in 0..3 {
        done(&server, &take(&server, "saga-reserve").await).await;
    }
    done(&server, &take(&server, "saga-release").await).await;
    let broken = take(&server, "saga-release").await;
    let (status, body) = fail(&server, &broken, "RELEASE.BROKEN").await;
    assert_eq!(status, 200, "{body}");
    let failed = server.wait_for_status(&looped, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.COMPENSATION.FAILED",
        "{failed}"
    );

    let body = server.deploy_accepted(&sagas("saga-release-fixed")).await;
    assert_eq!(body["version"], 2);
    let (status, body) = server
        .post_json(
            &format!("/v1/instances/{looped}/migrate"),
            &json!({"to_version": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = server
        .post(&format!("/v1/instances/{looped}/restore"))
        .await;
    assert_eq!(status, 200, "{body}");
    for _ in 0..2 {
        done(&server, &take(&server, "saga-release-fixed").await).await;
    }
    let finished = server.wait_for_status(&looped, "completed").await;
    assert_eq!(finished["version"], 2);
    let history = server.history(&looped).await;
    assert_eq!(
        undone(&history),
        [json!(2), json!(1), json!(0)],
        "each completion undone once: {history:#?}"
    );
}
