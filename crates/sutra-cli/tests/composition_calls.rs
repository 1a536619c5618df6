//! Calls (issue 33, decision 0052), through the HTTP API of a real `sutra serve`: on SQLite, and
//! on PostgreSQL with two replicas (instances started on one, their tasks polled and completed
//! on the other, deliveries dispatched by whichever leads).
//!
//! - A call runs its flow as an instance of its own, listed under its parent
//!   (`?parent=`), and the child's reply lands in the caller's `output`.
//! - A child's failure with `on-error` sends the caller there with `vars.error`, and the failed
//!   child is cancelled; without `on-error` the caller keeps waiting, and restoring the child
//!   (which then completes) resumes it.
//! - Cancelling the caller cancels its child and the child's child, each through its own claim.
//! - A deadline on a call ends the wait and cancels the child.
//! - A for-each whose body calls a flow collects the children's replies in item order.
//! - A call nested past `sutra.call.max-depth` goes to `on-error` with the depth code.

mod common;

use common::composition::{
    self, complete, events, fail, on_sqlite, on_two_postgres_replicas, poll,
};
use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, serve, until};

const ORDERS: &str = r#"
name: orders
channels:
  orders: { transport: http, correlate: data.id }
  strict: { transport: http, correlate: data.id }
  nested: { transport: http, correlate: data.id }
  hurried: { transport: http, correlate: data.id }
  baskets: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: "= vars.input.id" } }
        output: shipment
        on-error: ship-failed
      - id: shipped
        end: { reply: "= vars.shipment" }
      - id: ship-failed
        end: { reply: "= vars.error" }
  strict:
    start: { channel: strict }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: "= vars.input.id" } }
        output: shipment
      - id: shipped
        end: { reply: "= vars.shipment" }
  nested:
    start: { channel: nested }
    nodes:
      - id: deliver
        call: { flow: delivery, input: { order: "= vars.input.id" } }
  hurried:
    start: { channel: hurried }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: "= vars.input.id" } }
        deadline: { after: PT2S, next: late }
      - id: late
        end: { reply: late }
  baskets:
    start: { channel: baskets }
    nodes:
      - id: reserve-all
        for-each:
          items: "= vars.input.items"
          concurrency: 2
          call: { flow: shipping, input: { order: "= item" } }
        output: shipments
      - id: reserved
        end: { reply: "= vars.shipments" }
  shipping:
    nodes:
      - id: book
        task: { topic: book-carrier, input: { order: "= vars.input.order" } }
        output: booking
      - id: booked
        end: { reply: { order: "= vars.input.order", booking: "= vars.booking" } }
  delivery:
    nodes:
      - id: ship
        call: { flow: shipping, input: "= vars.input" }
"#;

/// Starts order `id` on `channel` with `data`.
async fn start(server: &Server, channel: &str, id: &str) -> String {
    composition::start(server, channel, id, json!({"id": id})).await
}

/// Long-polls `book-carrier` for its one task.
async fn take(server: &Server) -> Value {
    let tasks = poll(server, "book-carrier", 1).await;
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    tasks[0].clone()
}

/// The children `parent` called, from `GET /v1/instances?parent=`.
async fn children(server: &Server, parent: &str) -> Vec<Value> {
    let (status, page) = server.get(&format!("/v1/instances?parent={parent}")).await;
    assert_eq!(status, 200, "{page}");
    page["items"].as_array().cloned().unwrap_or_default()
}

/// The one child `parent` called, once it exists.
async fn only_child(server: &Server, parent: &str) -> String {
    until("a child", async || {
        children(server, parent).await.len() == 1
    })
    .await;
    let child = &children(server, parent).await[0];
    child["id"].as_str().expect("a child id").to_owned()
}

async fn a_call_runs_its_flow_as_a_child_and_takes_its_reply(a: &Server, b: &Server) {
    let order = start(a, "orders", "o1").await;
    let task = take(b).await;
    let child = only_child(a, &order).await;
    let called = a.instance(&child).await;
    assert_eq!(called["flow"], "shipping");
    assert_eq!(called["version"], a.instance(&order).await["version"]);
    assert_eq!(
        called["parent"],
        json!({"instance": order, "node": "ship", "depth": 1})
    );
    assert_eq!(called["vars"]["input"], json!({"order": "o1"}));

    let (status, body) = complete(b, &task, json!("DHL-1")).await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&order, "completed").await;
    assert_eq!(
        done["vars"]["shipment"],
        json!({"order": "o1", "booking": "DHL-1"})
    );
    assert_eq!(a.instance(&child).await["status"], "completed");
    let history = a.history(&order).await;
    assert_eq!(events(&history, "called")[0]["detail"]["child"], child);
    let ended = events(&history, "child_ended");
    assert_eq!(ended.len(), 1, "{history:#?}");
    assert_eq!(ended[0]["detail"]["status"], "completed");
    assert!(children(a, &child).await.is_empty(), "a leaf calls nothing");
}

async fn a_failed_child_goes_to_on_error_and_is_cancelled(a: &Server, b: &Server) {
    let order = start(a, "orders", "o2").await;
    let task = take(b).await;
    let child = only_child(a, &order).await;
    let (status, body) = fail(b, &task, "NO.CARRIER").await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&order, "completed").await;
    let error = &done["vars"]["error"];
    assert_eq!(error["code"], "NO.CARRIER", "{done}");
    assert_eq!(error["instance"], child.as_str(), "{done}");
    // The caller left the call: the failed child is cancelled, not left in the failed inbox.
    a.wait_for_status(&child, "cancelled").await;
}

async fn an_uncaught_failure_waits_for_the_child_to_be_restored(a: &Server, b: &Server) {
    let order = start(a, "strict", "s1").await;
    let task = take(b).await;
    let child = only_child(a, &order).await;
    let (status, body) = fail(b, &task, "NO.CARRIER").await;
    assert_eq!(status, 200, "{body}");
    a.wait_for_status(&child, "failed").await;
    let waiting = a
        .wait_for_instance(&order, "hear of the failure", |i| {
            i["tokens"][0]["park"]["failed"]["code"] == "NO.CARRIER"
        })
        .await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");

    let (status, body) = a.post(&format!("/v1/instances/{child}/restore")).await;
    assert_eq!(status, 200, "{body}");
    let again = take(b).await;
    let (status, body) = complete(b, &again, json!("UPS-2")).await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&order, "completed").await;
    assert_eq!(done["vars"]["shipment"]["booking"], "UPS-2", "{done}");
    let statuses: Vec<Value> = events(&a.history(&order).await, "child_ended")
        .iter()
        .map(|e| e["detail"]["status"].clone())
        .collect();
    assert_eq!(statuses, [json!("failed"), json!("completed")]);
}

async fn cancelling_the_caller_cancels_two_levels_down(a: &Server, b: &Server) {
    let order = start(a, "nested", "n1").await;
    let task = take(b).await;
    let delivery = only_child(a, &order).await;
    let shipping = only_child(a, &delivery).await;
    assert_eq!(a.instance(&shipping).await["parent"]["depth"], 2);

    let (status, body) = a.post(&format!("/v1/instances/{order}/cancel")).await;
    assert_eq!(status, 200, "{body}");
    a.wait_for_status(&delivery, "cancelled").await;
    a.wait_for_status(&shipping, "cancelled").await;
    assert_eq!(a.instance(&order).await["status"], "cancelled");
    let (status, answer) = complete(b, &task, json!("too late")).await;
    assert_eq!(status, 409, "the grandchild's task was withdrawn: {answer}");
}

async fn a_deadline_on_a_call_cancels_the_child(a: &Server, b: &Server) {
    let order = start(a, "hurried", "h1").await;
    take(b).await;
    let child = only_child(a, &order).await;
    let done = a.wait_for_status(&order, "completed").await;
    assert_eq!(done["tokens"], json!([]), "{done}");
    a.wait_for_status(&child, "cancelled").await;
    let history = a.history(&order).await;
    assert_eq!(events(&history, "deadline_fired").len(), 1, "{history:#?}");
}

async fn a_for_each_of_calls_collects_replies_in_item_order(a: &Server, b: &Server) {
    let items = json!(["x1", "x2", "x3"]);
    let basket = composition::start(a, "baskets", "b1", json!({"id": "b1", "items": items})).await;
    // Two at a time: answer each pair in reverse order, and the third after them.
    let mut answered = 0;
    while answered < 3 {
        let mut tasks = poll(b, "book-carrier", 2).await;
        tasks.reverse();
        for task in &tasks {
            let booking = format!("B-{}", task["input"]["order"].as_str().unwrap_or("?"));
            let (status, body) = complete(b, task, json!(booking)).await;
            assert_eq!(status, 200, "{body}");
            answered += 1;
        }
    }
    let done = a.wait_for_status(&basket, "completed").await;
    let orders: Vec<Value> = done["vars"]["shipments"]
        .as_array()
        .expect("a list of shipments")
        .iter()
        .map(|shipment| shipment["booking"].clone())
        .collect();
    assert_eq!(orders, [json!("B-x1"), json!("B-x2"), json!("B-x3")]);
    assert_eq!(children(a, &basket).await.len(), 3);
}

async fn a_child_cancelled_by_someone_else_sends_its_caller_to_on_error(a: &Server, b: &Server) {
    let order = start(a, "orders", "o3").await;
    let task = take(b).await;
    let child = only_child(a, &order).await;
    let (status, body) = a.post(&format!("/v1/instances/{child}/cancel")).await;
    assert_eq!(status, 200, "{body}");
    let done = a.wait_for_status(&order, "completed").await;
    let error = &done["vars"]["error"];
    assert_eq!(error["code"], "SUTRA.RUNTIME.CALL.CANCELLED", "{done}");
    assert_eq!(error["instance"], child.as_str(), "{done}");
    let (status, answer) = complete(b, &task, json!("too late")).await;
    assert_eq!(
        status, 409,
        "the cancelled child's task was withdrawn: {answer}"
    );
}

async fn every_rule(a: &Server, b: &Server) {
    a_call_runs_its_flow_as_a_child_and_takes_its_reply(a, b).await;
    a_failed_child_goes_to_on_error_and_is_cancelled(a, b).await;
    a_child_cancelled_by_someone_else_sends_its_caller_to_on_error(a, b).await;
    an_uncaught_failure_waits_for_the_child_to_be_restored(a, b).await;
    cancelling_the_caller_cancels_two_levels_down(a, b).await;
    a_deadline_on_a_call_cancels_the_child(a, b).await;
    a_for_each_of_calls_collects_replies_in_item_order(a, b).await;
}

#[tokio::test]
async fn calls_on_sqlite() {
    let (_scratch, server) = on_sqlite("composition-calls", ORDERS).await;
    every_rule(&server, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_on_postgres_with_two_replicas() {
    let (_database, fleet) = on_two_postgres_replicas("composition-calls", ORDERS).await;
    every_rule(fleet.replica(0), fleet.replica(1)).await;
}

/// A call one level past `sutra.call.max-depth` goes to the caller's `on-error` with
/// `SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED`; the levels above it end as their flows say.
#[tokio::test]
async fn a_call_past_the_depth_bound_goes_to_on_error() {
    const RECURSIVE: &str = r#"
name: recursive
channels:
  dig: { transport: http, correlate: data.id }
flows:
  dig:
    start: { channel: dig }
    nodes:
      - id: deeper
        call: { flow: dig, input: "= vars.input" }
        output: reply
        on-error: bottom
      - id: up
        end: { reply: "= vars.reply" }
      - id: bottom
        end: { reply: "= vars.error.code" }
"#;
    let scratch = Scratch::new("composition-calls-depth");
    let server = serve!(scratch.database())
        .env("SUTRA_CALL_MAX_DEPTH", "2")
        .deployed(RECURSIVE)
        .await;
    let root = start(&server, "dig", "d1").await;
    let child = only_child(&server, &root).await;
    let grandchild = only_child(&server, &child).await;
    let bottom = server.wait_for_status(&grandchild, "completed").await;
    assert_eq!(bottom["parent"]["depth"], 2);
    assert_eq!(
        bottom["vars"]["error"]["code"], "SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED",
        "{bottom}"
    );
    assert!(children(&server, &grandchild).await.is_empty());
    // Each level above answers its caller with the reply it got.
    let top = server.wait_for_status(&root, "completed").await;
    assert_eq!(
        top["vars"]["reply"], "SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED",
        "{top}"
    );
}

/// A caller migrated onto version 2 while parked on a call keeps its child, which runs on
/// version 1 — and keeps version 1 draining (one unended instance, one live task) until it
/// ends; its end then resumes the caller on version 2, and version 1 retires.
#[tokio::test]
async fn a_migrated_caller_keeps_its_child_whose_version_drains_until_it_ends() {
    let scratch = Scratch::new("composition-calls-migration");
    let server = serve!(scratch.database())
        .env("SUTRA_DEPLOYMENTS_RETIRE_INTERVAL", "PT0.2S")
        .claim_timeout(std::time::Duration::from_secs(1))
        .deployed(ORDERS)
        .await;
    let order = start(&server, "strict", "m1").await;
    let task = take(&server).await;
    let child = only_child(&server, &order).await;
    let body = server.deploy_accepted(ORDERS).await;
    assert_eq!(body["version"], 2);

    let (status, body) = server
        .post_json(
            &format!("/v1/instances/{order}/migrate"),
            &json!({"to_version": 2}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let migrated = server.instance(&order).await;
    assert_eq!(migrated["version"], 2, "{migrated}");
    assert_eq!(migrated["tokens"][0]["park"]["child"], child, "{migrated}");
    let called = server.instance(&child).await;
    assert_eq!(
        (called["version"].clone(), called["status"].clone()),
        (json!(1), json!("suspended"))
    );
    let kept = json!({"instances": 1, "outbox": 0, "tasks": 1});
    until("version 1 kept by the child alone", async || {
        let (_, v1) = server.get("/v1/deployments/orders/1").await;
        v1["status"] == "draining" && v1["retirement"] == kept
    })
    .await;

    let (status, body) = complete(&server, &task, json!("DHL-9")).await;
    assert_eq!(status, 200, "{body}");
    let done = server.wait_for_status(&order, "completed").await;
    assert_eq!(done["vars"]["shipment"]["booking"], "DHL-9", "{done}");
    until("version 1 retired", async || {
        server.get("/v1/deployments/orders/1").await.1["status"] == "retired"
    })
    .await;
}
