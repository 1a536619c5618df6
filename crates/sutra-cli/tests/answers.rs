//! Answers across replicas (SPEC §5.3, decision 0024): a caller held by `ack: complete` on one
//! `sutra serve` replica is answered when a step on another replica ends its instance — with the
//! reply the ending step gave, at once, not at the ack timeout.
//!
//! Two replicas over one PostgreSQL database. The start is sent to replica 0, which holds its
//! caller; the instance parks on a task, which a worker polls and completes through replica 1,
//! where the completion resumes the instance in place and ends it. Replica 0 hears of it only
//! through the end notice that replica 1's commit sent. A second instance is cancelled through
//! replica 1's admin API: an ending step of another kind, answered alike.

mod common;

use std::time::{Duration, Instant};

use common::{Fleet, Timing};
use serde_json::{Value, json};
use sutra_testkit::Server;
use sutra_testkit::postgres::TestDatabase;

/// Far longer than an answer takes: a caller answered only at its ack timeout fails the test.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);
/// How soon after the ending step the held caller must have its answer: well short of
/// [`ACK_TIMEOUT`], with room for a slow machine.
const ANSWERED_WITHIN: Duration = Duration::from_secs(20);

fn quotes() -> String {
    format!(
        r#"
name: quotes
channels:
  quotes:
    transport: http
    correlate: data.id
    ack: complete
    ack-timeout: PT{}S
flows:
  quote:
    start: {{ channel: quotes }}
    nodes:
      - id: price
        task: {{ topic: price, input: {{ item: "= vars.input.item" }} }}
        output: price
      - id: done
        end: {{ reply: {{ item: "= vars.input.item", price: "= vars.price.amount" }} }}
"#,
        ACK_TIMEOUT.as_secs()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_caller_held_on_one_replica_is_answered_when_another_replica_ends_its_instance() {
    let database = TestDatabase::create().await;
    let fleet = Fleet::of("answers", 2, Timing::SHORT)
        .start(database.url(), &quotes())
        .await;
    // Replica 1 started after replica 0 deployed, so it serves the flow from its first request:
    // the completion resumes the instance there, in place, and never as a delivery that the
    // `timers` leader (either replica) would take.
    let (holder, ender) = (fleet.replica(0), fleet.replica(1));

    // Completed through replica 1: replica 0's caller gets the end's reply.
    let held = tokio::spawn(send_quote(holder.url(""), "q-1", "lamp"));
    let task = poll_one(ender).await;
    assert_eq!(task["input"], json!({"item": "lamp"}));
    let body = json!({"lock_token": task["lock_token"], "output": {"amount": 42}});
    let path = format!("/v1/tasks/{}/complete", task["id"].as_str().unwrap());
    let (status, answer) = ender.post_json(&path, &body).await;
    assert!(status < 300, "{status} {answer}");
    let ended = Instant::now();
    let (status, reply) = held.await.unwrap();
    assert_eq!(
        (status, reply),
        (200, json!({"item": "lamp", "price": 42})),
        "replica 0's caller is answered with the end's reply"
    );
    assert_answered_in_time(ended);
    let instance = task["instance"].as_str().unwrap();
    assert_eq!(holder.instance(instance).await["status"], "completed");

    // Cancelled through replica 1's admin API: replica 0's caller is told so.
    let held = tokio::spawn(send_quote(holder.url(""), "q-2", "desk"));
    let task = poll_one(ender).await;
    let instance = task["instance"].as_str().unwrap();
    let (status, answer) = ender
        .post(&format!("/v1/instances/{instance}/cancel"))
        .await;
    assert_eq!(status, 200, "{answer}");
    let ended = Instant::now();
    let (status, problem) = held.await.unwrap();
    assert_eq!(
        (status, &problem["code"]),
        (409, &json!("SUTRA.ADMIN.STATE.INVALID")),
        "{problem}"
    );
    assert_eq!(problem["instance"], json!(instance), "{problem}");
    assert_answered_in_time(ended);
}

/// Sends a quote request to the replica at `base` and waits for its answer, as a caller of an
/// `ack: complete` channel does.
async fn send_quote(base: String, id: &str, item: &str) -> (u16, Value) {
    let event = sutra_testkit::event(id, json!({"id": id, "item": item}));
    let response = reqwest::Client::new()
        .post(format!("{base}/v1/channels/quotes/messages"))
        .header("content-type", "application/cloudevents+json")
        .body(event.to_string())
        .timeout(ACK_TIMEOUT * 2)
        .send()
        .await
        .expect("the holding replica answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

/// Long-polls the `price` topic through `server` until it hands out one task.
async fn poll_one(server: &Server) -> Value {
    let body = json!({"worker": "pricer", "topics": ["price"], "wait": "PT5S"});
    let deadline = Instant::now() + ACK_TIMEOUT;
    while Instant::now() < deadline {
        let (status, tasks) = server.post_json("/v1/tasks/poll", &body).await;
        assert_eq!(status, 200, "{tasks}");
        if let Some(task) = tasks.as_array().and_then(|tasks| tasks.first()) {
            return task.clone();
        }
    }
    panic!("no task was handed out within {ACK_TIMEOUT:?}");
}

fn assert_answered_in_time(ended: Instant) {
    let waited = ended.elapsed();
    assert!(
        waited < ANSWERED_WITHIN,
        "the held caller was answered {waited:?} after its instance ended elsewhere"
    );
}
