//! Calls at the breadth hostile or careless flows reach (issue 48), through the HTTP API of a
//! real `sutra serve`, on SQLite and PostgreSQL:
//!
//! - One step that calls 17 children, or 1,000, inserts every one of them: their ids are drawn
//!   so that no two children of a step collide (the 17th was the 1st again, answered as a
//!   corrupt store); the 17 complete with their replies in item order.
//! - A flow that calls itself eight times a level, cancelled at its root, stops spawning: every
//!   instance of the tree ends, none is left to start another.
//! - A call past `sutra.call.max-children` fails the instance with its code.

mod common;

use std::collections::HashSet;

use common::composition::{self, events};
use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve, until, until_ok};

const WIDE: &str = r#"
name: wide
channels:
  baskets: { transport: http, correlate: data.id }
  bombs: { transport: http, correlate: data.id }
flows:
  basket:
    start: { channel: baskets }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          call: { flow: echo, input: "= item" }
        output: echoes
        on-error: refused
      - id: done
        end: { reply: "= size(vars.echoes)" }
      - id: refused
        end: { reply: "= vars.error.code" }
  echo:
    nodes:
      - id: back
        end: { reply: "= vars.input" }
  bomb:
    start: { channel: bombs }
    nodes:
      - id: again
        for-each:
          items: "= [1, 2, 3, 4, 5, 6, 7, 8]"
          call: { flow: bomb, input: "= vars.input" }
"#;

/// Starts a basket of `items` children; returns its instance.
async fn basket(server: &Server, id: &str, items: u32) -> String {
    let items: Vec<u32> = (0..items).collect();
    composition::start(server, "baskets", id, json!({"id": id, "items": items})).await
}

/// The ids of the children `parent` called, from every page of `GET /v1/instances?parent=`.
async fn children(server: &Server, parent: &str) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after = String::new();
    loop {
        let path = format!("/v1/instances?parent={parent}&limit=500{after}");
        let (status, page) = server.get(&path).await;
        assert_eq!(status, 200, "{page}");
        let items = page["items"].as_array().cloned().unwrap_or_default();
        ids.extend(
            items
                .iter()
                .filter_map(|i| i["id"].as_str().map(str::to_owned)),
        );
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return ids,
        }
    }
}

/// A basket of `items` calls every child in its first step, each an instance of its own.
async fn every_child_of_one_step_starts(server: &Server, items: u32) -> String {
    let id = basket(server, &format!("b{items}"), items).await;
    until("every child inserted", async || {
        children(server, &id).await.len() == items as usize
    })
    .await;
    let history = server.history(&id).await;
    let called: HashSet<String> = events(&history, "called")
        .iter()
        .map(|event| {
            event["detail"]["child"]
                .as_str()
                .expect("a child")
                .to_owned()
        })
        .collect();
    assert_eq!(called.len(), items as usize, "one child id per call");
    let listed: HashSet<String> = children(server, &id).await.into_iter().collect();
    assert_eq!(listed, called, "the children listed are the ones called");
    id
}

/// 17 children (the 17th had the 1st's id) complete with their replies in item order; 1,000
/// are all inserted by the one step that calls them.
async fn calls_of_one_step(server: &Server) {
    let seventeen = every_child_of_one_step_starts(server, 17).await;
    let done = server.wait_for_status(&seventeen, "completed").await;
    let expected: Vec<Value> = (0..17).map(|n| json!(n)).collect();
    assert_eq!(done["vars"]["echoes"], json!(expected), "{done}");
    every_child_of_one_step_starts(server, 1_000).await;
}

#[tokio::test]
async fn a_step_calling_17_or_1000_children_starts_each_on_sqlite() {
    let (_scratch, server) = composition::on_sqlite("calls-at-scale", WIDE).await;
    calls_of_one_step(&server).await;
}

#[tokio::test]
async fn a_step_calling_17_or_1000_children_starts_each_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url()).deployed(WIDE).await;
    calls_of_one_step(&server).await;
}

/// The instances of every status, as `GET /v1/scaling` counts them.
async fn counted(server: &Server) -> (u64, u64) {
    let (status, scaling) = server.get("/v1/scaling").await;
    assert_eq!(status, 200, "{scaling}");
    let by_status = scaling["instances"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let count = |wanted: &[&str]| {
        by_status
            .iter()
            .filter(|(status, _)| wanted.contains(&status.as_str()))
            .map(|(_, n)| n.as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    let live = count(&["created", "running", "suspended"]);
    (live, live + count(&["completed", "failed", "cancelled"]))
}

/// A self-calling fan-out, cancelled at its root once it has spread, ends whole: its cancels
/// come down one level per step while its starts went on spawning eight per level, so without
/// the starts looking up for a cancelled caller the tree outgrew its cancels for as long as
/// the depth bound allowed (issue 48: 168,000 instances 32 s after the cancel).
async fn a_cancelled_fan_out_stops_spawning(server: &Server) {
    let root = composition::start(server, "bombs", "root", json!({"id": "root"})).await;
    until("the fan-out to spread", async || {
        counted(server).await.1 >= 100
    })
    .await;
    // The embedded store's one writer is contended by the spreading tree: a cancel may be
    // answered `503 SUTRA.STORE.UNAVAILABLE, retryable`, and is sent again, as a client does.
    until_ok(async || {
        let (status, body) = server.post(&format!("/v1/instances/{root}/cancel")).await;
        match (status, body["retryable"].as_bool()) {
            (200, _) => Ok(()),
            (503, Some(true)) => Err(format!("the cancel kept being refused: {body}")),
            _ => panic!("the cancel was refused: {status} {body}"),
        }
    })
    .await;
    until("every instance of the tree to end", async || {
        counted(server).await.0 == 0
    })
    .await;
    let (live, total) = counted(server).await;
    assert_eq!(live, 0, "nothing left to spawn, of {total}");
    assert_eq!(server.instance(&root).await["status"], "cancelled");
}

#[tokio::test]
async fn a_fan_out_cancelled_at_its_root_stops_spawning_on_sqlite() {
    let (_scratch, server) = composition::on_sqlite("calls-bomb", WIDE).await;
    a_cancelled_fan_out_stops_spawning(&server).await;
}

#[tokio::test]
async fn a_fan_out_cancelled_at_its_root_stops_spawning_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url()).deployed(WIDE).await;
    a_cancelled_fan_out_stops_spawning(&server).await;
}

/// One child more than `sutra.call.max-children` allows at once fails the instance at the loop
/// with its code; as many as it allows run.
#[tokio::test]
async fn a_call_past_the_children_bound_fails_the_instance() {
    let scratch = Scratch::new("calls-children-bound");
    let server = serve!(scratch.database())
        .env("SUTRA_CALL_MAX_CHILDREN", "5")
        .deployed(WIDE)
        .await;
    let fits = basket(&server, "fits", 5).await;
    let done = server.wait_for_status(&fits, "completed").await;
    assert_eq!(done["vars"]["echoes"].as_array().map(Vec::len), Some(5));

    // A loop's body has no `on-error` of its own: the instance fails at the loop.
    let over = basket(&server, "over", 6).await;
    let failed = server.wait_for_status(&over, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.CALL.CHILDREN_EXCEEDED",
        "{failed}"
    );
}
