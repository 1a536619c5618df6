//! The delivery ceiling (docs/decisions/0047), end to end against a real `sutra serve`: a
//! delivery whose step always fails ends, after `sutra.deliveries.max-attempts` failed steps, as
//! a failed instance with `SUTRA.RUNTIME.DELIVERY.EXHAUSTED` in the failed inbox, restorable
//! once the cause is gone; a broker message whose step always fails is dead-lettered. Nothing
//! is retried forever.

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};
use sutra_testkit::brokers::{TestQueue, TestStream};
use sutra_testkit::{Scratch, Server, ServerOptions, event, serve, until};

const EXHAUSTED: &str = "SUTRA.RUNTIME.DELIVERY.EXHAUSTED";

/// A small ceiling, reached in a fraction of a second.
fn ceiling(options: ServerOptions) -> ServerOptions {
    options
        .env("SUTRA_DELIVERIES_MAX_ATTEMPTS", "3")
        .env("SUTRA_DELIVERIES_BACKOFF", "PT0.05S")
}

/// The value of `sutra_delivery_failures_total` for `path` and `outcome`.
async fn failures(server: &Server, path: &str, outcome: &str) -> f64 {
    let metrics = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let labels = [format!("path=\"{path}\""), format!("outcome=\"{outcome}\"")];
    metrics
        .lines()
        .filter(|line| line.starts_with("sutra_delivery_failures_total{"))
        .find(|line| labels.iter().all(|label| line.contains(label.as_str())))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no series {path}/{outcome} in {metrics}"))
}

/// Starts an instance on `channel`; its id.
async fn started(server: &Server, channel: &str, id: &str) -> String {
    let (status, body) = server.send(channel, id, json!({"id": id})).await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// The instance failed with the ceiling's code after `attempts` failed steps of `what`, and the
/// failed inbox lists it.
async fn failed_at_the_ceiling(server: &Server, instance: &str, what: &str) -> Value {
    let failed = server.wait_for_status(instance, "failed").await;
    let failure = &failed["failure"];
    assert_eq!(failure["code"], EXHAUSTED, "{failed}");
    let detail = failure["detail"].as_str().unwrap();
    assert!(
        detail.contains(what) && detail.contains("failed 3 times; the last error: "),
        "the detail names the delivery, the count and the last error: {detail}"
    );
    let (status, inbox) = server.get("/v1/instances?status=failed").await;
    assert_eq!(status, 200, "{inbox}");
    let listed: Vec<&Value> = inbox["items"].as_array().unwrap().iter().collect();
    assert!(
        listed.iter().any(|item| item["id"] == instance),
        "the failed inbox lists it: {inbox}"
    );
    failed
}

async fn restored(server: &Server, instance: &str) {
    let (status, body) = server
        .post(&format!("/v1/instances/{instance}/restore"))
        .await;
    assert_eq!(status, 200, "{body}");
}

const ONE_TASK: &str = r#"
name: ceiling-task
channels:
  jobs:
    transport: http
    correlate: data.id
flows:
  job:
    start: { channel: jobs }
    nodes:
      - id: work
        task: { topic: ceiling-work, input: { id: "= vars.input.id" } }
        output: worked
"#;

/// Polls the one task of `topic` and completes it; the completion's answer.
async fn complete_the_task(server: &Server) {
    let poll = json!({"worker": "w1", "topics": ["ceiling-work"], "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(
        (status, tasks.as_array().map(Vec::len)),
        (200, Some(1)),
        "{tasks}"
    );
    let task = &tasks[0];
    let path = format!("/v1/tasks/{}/complete", task["id"].as_str().unwrap());
    let body = json!({"lock_token": task["lock_token"], "output": {"done": true}});
    let (status, answer) = server.post_json(&path, &body).await;
    assert_eq!(status, 200, "the worker's call succeeds: {answer}");
}

#[tokio::test]
async fn a_task_outcome_whose_step_always_panics_fails_its_instance_within_the_ceiling() {
    let scratch = Scratch::new("ceiling-task");
    let options = ceiling(serve!(scratch.database()));
    let mut server = options
        .clone()
        .fault("apply-task-outcome@*:panic")
        .deployed(ONE_TASK)
        .await;
    let instance = started(&server, "jobs", "j1").await;

    // The completion's resume in place panics: its output is recorded as a delivery, whose step
    // panics at every attempt.
    complete_the_task(&server).await;

    failed_at_the_ceiling(&server, &instance, "a task's completion delivered to park").await;
    assert_eq!(
        (
            failures(&server, "delivery", "retried").await,
            failures(&server, "delivery", "exhausted").await
        ),
        (2.0, 1.0)
    );

    // The cause fixed — the server runs without the fault — the ordinary restore brings the
    // instance back: its task is armed again, and completing it completes the instance.
    server.stop();
    let server = Server::start(&options);
    restored(&server, &instance).await;
    complete_the_task(&server).await;
    let completed = server.wait_for_status(&instance, "completed").await;
    assert_eq!(
        completed["vars"]["worked"],
        json!({"done": true}),
        "{completed}"
    );
}

const ONE_TIMER: &str = r#"
name: ceiling-timer
channels:
  naps:
    transport: http
    correlate: data.id
flows:
  nap:
    start: { channel: naps }
    nodes:
      - id: sleep
        wait: { duration: PT1H }
      - id: done
        end: {}
"#;

/// Runs `sql` on the instances `ids` (`?1`, `?2`, …), which it must change.
async fn execute(database: &mut SqliteConnection, sql: &str, ids: &[&str]) {
    let query = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()));
    let bound = ids.iter().fold(query, |query, id| query.bind(*id));
    let changed = bound.execute(&mut *database).await.unwrap().rows_affected();
    assert!(changed > 0, "{sql} changed nothing for {ids:?}");
}

/// The instance's timer is due now instead of in an hour.
async fn timer_due_now(database: &mut SqliteConnection, instance: &str) {
    execute(
        database,
        "UPDATE deliveries SET due_at = 0 WHERE instance = ?1",
        &[instance],
    )
    .await;
}

#[tokio::test]
async fn a_timer_whose_step_reads_a_corrupt_row_fails_its_instance_within_the_ceiling() {
    let scratch = Scratch::new("ceiling-timer");
    let server = ceiling(serve!(scratch.database()))
        .deployed(ONE_TIMER)
        .await;
    let instance = started(&server, "naps", "n1").await;
    let neighbour = started(&server, "naps", "n2").await;
    server.wait_for_node(&instance, "sleep").await;
    server.wait_for_node(&neighbour, "sleep").await;
    let mut database = SqliteConnection::connect(&scratch.database())
        .await
        .unwrap();

    // A history row two ahead of the snapshot's audit sequence: the timer's step, which writes
    // more than one event, repeats its sequence and the store refuses the commit as corrupt,
    // every time; failing the instance writes one event, and lands.
    execute(
        &mut database,
        "INSERT INTO history (tenant, instance, seq, at, kind, node, token, detail)
         SELECT tenant, instance, MAX(seq) + 2, 0, 'corrupt', NULL, NULL, '{}'
         FROM history WHERE instance = ?1 GROUP BY tenant, instance",
        &[&instance],
    )
    .await;
    // Both timers due at once, handed to the one lane together: a failing member of a group
    // fails no other member (the group runs each alone again).
    execute(
        &mut database,
        "UPDATE deliveries SET due_at = 0 WHERE instance IN (?1, ?2)",
        &[&instance, &neighbour],
    )
    .await;

    let failed = failed_at_the_ceiling(&server, &instance, "a timer delivered to park").await;
    server.wait_for_status(&neighbour, "completed").await;
    let detail = failed["failure"]["detail"].as_str().unwrap();
    assert!(detail.contains("corrupt"), "the last error: {detail}");

    // The row repaired, the ordinary restore arms the timer again, and its step completes it.
    execute(
        &mut database,
        "DELETE FROM history WHERE instance = ?1 AND kind = 'corrupt'",
        &[&instance],
    )
    .await;
    restored(&server, &instance).await;
    timer_due_now(&mut database, &instance).await;
    server.wait_for_status(&instance, "completed").await;
}

#[tokio::test]
async fn a_delivery_to_an_unreadable_snapshot_is_deferred_until_the_row_is_repaired_and_restored() {
    let scratch = Scratch::new("ceiling-unreadable");
    // The longest backoff is the claim timeout: a short one, so that the repaired row is
    // taken soon after.
    let server = ceiling(serve!(scratch.database()))
        .claim_timeout(Duration::from_secs(1))
        .deployed(ONE_TIMER)
        .await;
    let instance = started(&server, "naps", "u1").await;
    server.wait_for_node(&instance, "sleep").await;
    let mut database = SqliteConnection::connect(&scratch.database())
        .await
        .unwrap();
    // A snapshot of a format no build knows cannot be decoded, so the failure cannot be
    // written into it: it is written in the row (docs/decisions/0082).
    execute(
        &mut database,
        "UPDATE instances SET snapshot = json_set(snapshot, '$.format', 999) WHERE id = ?1",
        &[&instance],
    )
    .await;
    timer_due_now(&mut database, &instance).await;

    until("the delivery is found unreadable", async || {
        failures(&server, "delivery", "unreadable").await >= 1.0
    })
    .await;
    assert_eq!(failures(&server, "delivery", "exhausted").await, 0.0);
    let (status, inbox) = server.get("/v1/instances?status=failed").await;
    assert_eq!(status, 200, "{inbox}");
    assert_eq!(inbox["items"][0]["id"], instance, "{inbox}");
    assert_eq!(inbox["items"][0]["failure"]["code"], "SUTRA.STORE.CORRUPT");

    // Repaired and restored, the row is read again at the delivery's next attempt, one claim
    // timeout at most, and the timer's step completes the instance.
    execute(
        &mut database,
        "UPDATE instances SET snapshot = json_set(snapshot, '$.format', 1) WHERE id = ?1",
        &[&instance],
    )
    .await;
    restored(&server, &instance).await;
    server.wait_for_status(&instance, "completed").await;
}

/// Starts on HTTP, then waits for its confirmation on `confirmations`, a broker channel.
fn confirmed_over(confirmations: &str) -> String {
    format!(
        r#"
name: ceiling-relay
channels:
  orders: {{ transport: http, correlate: data.id }}
  confirmations: {confirmations}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: confirmed
        receive: {{ channel: confirmations, key: vars.input.id }}
        output: confirmation
      - id: done
        end: {{}}
"#
    )
}

#[tokio::test]
async fn an_amqp_relay_whose_step_always_fails_is_dead_lettered_within_the_ceiling() {
    let confirmations = TestQueue::declare_with_dead_letters("sutra-test-ceiling").await;
    let scratch = Scratch::new("ceiling-relay");
    let server = ceiling(serve!(scratch.database()).amqp())
        .fault("apply-relay@*:panic")
        .deployed(&confirmed_over(&format!(
            "{{ transport: amqp, queue: {}, correlate: data.order }}",
            confirmations.name
        )))
        .await;
    let instance = started(&server, "orders", "o1").await;
    server.wait_for_node(&instance, "confirmed").await;

    confirmations
        .publish_event(&event("confirmation-1", json!({"order": "o1"})))
        .await;

    let dead = confirmations.next_dead_letter().await;
    let dead: Value = serde_json::from_slice(&dead.data).unwrap();
    assert_eq!(dead["id"], "confirmation-1");
    until("the dead-lettering is counted", async || {
        failures(&server, "broker", "dead_lettered").await == 1.0
    })
    .await;
    assert_eq!(failures(&server, "broker", "retried").await, 2.0);
    let waiting = server.instance(&instance).await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");
    confirmations.delete().await;
}

#[tokio::test]
async fn a_nats_relay_whose_step_always_fails_is_terminated_within_the_ceiling() {
    let confirmations = TestStream::create("sutra-test-ceiling").await;
    let scratch = Scratch::new("ceiling-relay-nats");
    let channel = format!(
        "{{ transport: nats, stream: {}, subject: {}, correlate: data.order }}",
        confirmations.name, confirmations.subject
    );
    let server = ceiling(serve!(scratch.database()).nats())
        .fault("apply-relay@*:panic")
        .deployed(&confirmed_over(&channel))
        .await;
    let instance = started(&server, "orders", "o1").await;
    server.wait_for_node(&instance, "confirmed").await;
    let mut terminations = confirmations
        .terminations("sutra-ceiling-relay-confirmations")
        .await;

    confirmations
        .publish_binary("confirmation-1", &json!({"order": "o1"}))
        .await;

    let advisory = TestStream::next_termination(&mut terminations).await;
    assert_eq!(advisory["stream_seq"], 1, "{advisory}");
    assert_eq!(
        (
            failures(&server, "broker", "retried").await,
            failures(&server, "broker", "dead_lettered").await
        ),
        (2.0, 1.0)
    );
    confirmations.delete().await;
}
