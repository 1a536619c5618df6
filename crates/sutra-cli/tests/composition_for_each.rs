//! `for-each` (issue 33, decision 0051), through the HTTP API of a real `sutra serve`: on
//! SQLite, and on PostgreSQL with two replicas (instances started on one, tasks polled and
//! completed through the other).
//!
//! - A loop of 100 items at concurrency 5 never offers more than 5 of its tasks at once, and its
//!   outputs come back in item order while its tasks are completed in a shuffled order.
//! - A body that fails sends the loop to `on-error` with `vars.error.index`; the other bodies'
//!   tasks are withdrawn, and their late completions answer the lock-lost code.
//! - A loop's deadline withdraws the bodies still running and goes on at its `next`.
//! - An empty list gives an empty output; a list that is no list, or longer than
//!   `sutra.for-each.max-items`, fails the instance with its code.

mod common;

use common::composition::{
    self, assert_lock_lost, complete, fail, on_sqlite, on_two_postgres_replicas, poll,
};
use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, serve};

const RESERVATIONS: &str = r#"
name: reservations
channels:
  orders: { transport: http, correlate: data.id }
  bulk: { transport: http, correlate: data.id }
  timed: { transport: http, correlate: data.id }
flows:
  reserve:
    start: { channel: orders }
    nodes:
      - id: reserve-all
        for-each:
          items: "= vars.input.items"
          as: line
          task: { topic: reserve-stock, input: { sku: "= line.sku", position: "= index" } }
        output: reservations
        on-error: out-of-stock
      - id: done
        end: { reply: "= vars.reservations" }
      - id: out-of-stock
        set: { failed: "= vars.error" }
  timed:
    start: { channel: timed }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          task: { topic: slow-item, input: "= item" }
        output: results
        deadline: { after: PT2S, next: late }
      - id: done
        end: {}
      - id: late
        set: { late: "= true" }
  bulk:
    start: { channel: bulk }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          concurrency: 5
          task: { topic: bulk-item, input: "= item" }
        output: results
"#;

/// Starts `id` on `channel`, looping over `items`.
async fn start(server: &Server, channel: &str, id: &str, items: Value) -> String {
    composition::start(server, channel, id, json!({"id": id, "items": items})).await
}

/// A small deterministic shuffle: the tasks of one poll completed in an order that is not theirs.
fn shuffled(mut tasks: Vec<Value>, seed: usize) -> Vec<Value> {
    let len = tasks.len();
    for i in 0..len {
        tasks.swap(i, (i * 7 + seed * 3 + 1) % len);
    }
    tasks
}

async fn a_hundred_items_at_concurrency_five_come_back_in_item_order(a: &Server, b: &Server) {
    let items: Vec<Value> = (0..100).map(|n| json!({"n": n})).collect();
    let instance = start(a, "bulk", "b1", json!(items)).await;
    let mut completed = 0;
    let mut round = 0;
    while completed < 100 {
        let tasks = poll(b, "bulk-item", 50).await;
        assert!(
            tasks.len() <= 5,
            "at most 5 bodies at once, got {}",
            tasks.len()
        );
        for task in shuffled(tasks, round) {
            let n = task["input"]["n"].as_u64().expect("the item");
            let (status, body) = complete(b, &task, json!({"done": n})).await;
            assert_eq!(status, 200, "{body}");
            completed += 1;
        }
        round += 1;
    }
    let done = a.wait_for_status(&instance, "completed").await;
    let expected: Vec<Value> = (0..100).map(|n| json!({"done": n})).collect();
    assert_eq!(done["vars"]["results"], json!(expected));
}

async fn a_failing_body_ends_the_loop_at_on_error_and_withdraws_the_others(a: &Server, b: &Server) {
    let items: Vec<Value> = ["a", "b", "c", "d"]
        .iter()
        .map(|sku| json!({"sku": sku}))
        .collect();
    let instance = start(a, "orders", "o1", json!(items)).await;
    let mut tasks = Vec::new();
    while tasks.len() < 4 {
        tasks.extend(poll(b, "reserve-stock", 10).await);
    }
    tasks.sort_by_key(|task| task["input"]["position"].as_u64());
    let (status, body) = complete(b, &tasks[0], json!("r-a")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = fail(b, &tasks[2], "STOCK.NONE").await;
    assert_eq!(status, 200, "{body}");

    let ended = a.wait_for_status(&instance, "completed").await;
    assert_eq!(
        ended["vars"]["failed"],
        json!({"code": "STOCK.NONE", "message": "none left", "index": 2})
    );
    assert!(ended["vars"].get("reservations").is_none(), "{ended}");
    for late in [&tasks[1], &tasks[3]] {
        assert_lock_lost(b, late).await;
    }
}

async fn an_empty_list_gives_an_empty_output(a: &Server) {
    let instance = start(a, "orders", "empty", json!([])).await;
    let done = a.wait_for_status(&instance, "completed").await;
    assert_eq!(done["vars"]["reservations"], json!([]));
}

async fn what_is_no_list_fails_the_instance(a: &Server) {
    let instance = start(a, "orders", "not-a-list", json!({"sku": "a"})).await;
    let failed = a.wait_for_status(&instance, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.FOR_EACH.NOT_A_LIST",
        "{failed}"
    );
}

async fn a_loops_deadline_withdraws_the_bodies_still_running(a: &Server, b: &Server) {
    let instance = start(a, "timed", "t1", json!([1, 2, 3])).await;
    let mut tasks = Vec::new();
    while tasks.len() < 3 {
        tasks.extend(poll(b, "slow-item", 10).await);
    }
    let (status, body) = complete(b, &tasks[0], json!("one")).await;
    assert_eq!(status, 200, "{body}");
    let late = a.wait_for_status(&instance, "completed").await;
    assert_eq!(late["vars"]["late"], true, "{late}");
    assert!(late["vars"].get("results").is_none(), "{late}");
    for withdrawn in &tasks[1..] {
        assert_lock_lost(b, withdrawn).await;
    }
}

async fn every_rule(a: &Server, b: &Server) {
    a_loops_deadline_withdraws_the_bodies_still_running(a, b).await;
    a_hundred_items_at_concurrency_five_come_back_in_item_order(a, b).await;
    a_failing_body_ends_the_loop_at_on_error_and_withdraws_the_others(a, b).await;
    an_empty_list_gives_an_empty_output(a).await;
    what_is_no_list_fails_the_instance(a).await;
}

#[tokio::test]
async fn for_each_on_sqlite() {
    let (_scratch, server) = on_sqlite("composition-for-each", RESERVATIONS).await;
    every_rule(&server, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn for_each_on_postgres_with_two_replicas() {
    let (_database, fleet) = on_two_postgres_replicas("composition-for-each", RESERVATIONS).await;
    every_rule(fleet.replica(0), fleet.replica(1)).await;
}

#[tokio::test]
async fn a_list_longer_than_the_ceiling_fails_the_instance() {
    let scratch = Scratch::new("composition-for-each-ceiling");
    let server = serve!(scratch.database())
        .env("SUTRA_FOR_EACH_MAX_ITEMS", "3")
        .deployed(RESERVATIONS)
        .await;
    let items: Vec<Value> = (0..4).map(|n| json!({"sku": n})).collect();
    let instance = start(&server, "orders", "long", json!(items)).await;
    let failed = server.wait_for_status(&instance, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.FOR_EACH.TOO_MANY_ITEMS",
        "{failed}"
    );
}
