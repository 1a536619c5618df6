//! End to end: work refused by a held claim (SPEC §5.2), on each path it can arrive by, against
//! real `sutra serve` replicas on PostgreSQL and the real RabbitMQ and NATS JetStream.
//!
//! Replica `a` freezes (SIGSTOP, the `after-claim:stop` fault point) inside a step right after
//! its claim, holding the instance's row lock in its open transaction as any step in flight
//! does. Replica `b` meanwhile meets that claim: a broker message for the instance is requeued
//! and applied once after the claim is released; a due timer is looked at again; an
//! administrative step is refused. Each bounce counts on its own series of
//! `sutra_claim_bounces_total`, on `b`. Replica `a` has no broker URL, so that only `b` consumes
//! (a version deployed elsewhere still loads there), and it is started once `b` leads `timers`,
//! so that `b` dispatches the timer.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::brokers::{TestQueue, TestStream};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Server, ServerOptions, count_kind, event, serve, until};
use tokio::task::JoinHandle;

/// An order waits, side by side, for a poke over HTTP (the step `a` freezes in) and for what
/// `branch` waits for, on the channels `channels` declares besides.
fn poked_and(channels: &str, branch: &str) -> String {
    format!(
        r#"
name: held
channels:
  orders: {{ transport: http, correlate: data.id }}
  pokes: {{ transport: http, correlate: data.id }}
{channels}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: both
        parallel:
          - - id: poked
              receive: {{ channel: pokes, key: vars.input.id }}
          - - {branch}
      - id: done
        end: {{}}
"#
    )
}

/// The branch that waits for a message on `confirms`, declared by `channel`.
fn confirmed_over(channel: &str) -> String {
    poked_and(
        &format!("  confirms: {channel}"),
        "id: confirmed\n              receive: { channel: confirms, key: vars.input.id }",
    )
}

/// The branch that waits for a timer due a few seconds after the start: after `a` froze, and
/// well before PostgreSQL ends `a`'s idle transaction (ten seconds).
fn timed() -> String {
    poked_and("", "id: timed\n              wait: { duration: PT3S }")
}

/// The two replicas, the instance, and `a`'s frozen poke.
struct Held {
    holder: Server,
    other: Server,
    instance: String,
    poke: JoinHandle<reqwest::Result<reqwest::Response>>,
    _database: TestDatabase,
}

/// Deploys `document` through `b` (configured by `brokers`), starts an order on it, and sends
/// the poke to `a`, which freezes inside the poke's step holding the instance's claim.
async fn held(document: &str, brokers: impl FnOnce(ServerOptions) -> ServerOptions) -> Held {
    let database = TestDatabase::create().await;
    let other = Server::start(&brokers(serve!(database.url()).replica("b")));
    other.deploy_accepted(document).await;
    until("b leads timers", async || {
        other.metric(r#"sutra_lease_leader{role="timers"}"#).await == Some(1.0)
    })
    .await;
    let mut holder = Server::start(
        &serve!(database.url())
            .replica("a")
            .fault("after-claim:stop"),
    );
    let (status, body) = other.send("orders", "order-1", json!({"id": "o1"})).await;
    assert_eq!(status, 202, "{body}");
    let instance = body["instance"].as_str().unwrap().to_owned();
    other.wait_for_node(&instance, "poked").await;

    let url = holder.url("/v1/channels/pokes/messages");
    let poke = tokio::spawn(async move {
        let event = event("poke-1", json!({"id": "o1"}));
        reqwest::Client::new().post(url).json(&event).send().await
    });
    holder.wait_for_stderr("fault point after-claim reached");
    Held {
        holder,
        other,
        instance,
        poke,
        _database: database,
    }
}

impl Held {
    /// Waits until `b` counted a bounce on `path`.
    async fn until_bounced(&self, path: &str) {
        let series = format!("sutra_claim_bounces_total{{path=\"{path}\"}}");
        until(&format!("a bounce on the {path} path"), async || {
            self.other.metric(&series).await.unwrap_or(0.0) > 0.0
        })
        .await;
    }

    /// Thaws `a`: its step goes on and commits, releasing the claim. Should it have outlived
    /// its transaction (PostgreSQL ends an idle one after ten seconds, on a very slow machine),
    /// the poke is sent again, as a sender of a refused message does.
    async fn release(&mut self) {
        self.holder.thaw();
        let answered = tokio::time::timeout(Duration::from_secs(30), &mut self.poke).await;
        let status = match answered {
            Ok(Ok(Ok(response))) => response.status().as_u16(),
            other => panic!("the held step was not answered: {other:?}"),
        };
        if status != 202 {
            let (status, body) = self
                .other
                .send("pokes", "poke-1", json!({"id": "o1"}))
                .await;
            assert_eq!(status, 202, "the poke sent again: {body}");
        }
    }
}

/// The instance completed, having taken each of its two messages once.
async fn completed_once_each(server: &Server, instance: &str) {
    server.wait_for_status(instance, "completed").await;
    let history = server.history(instance).await;
    sutra_testkit::assert_audit_sequence_is_whole(&history);
    assert_eq!(
        count_kind(&history, "message_received"),
        2,
        "the poke and the confirmation, each applied once: {history:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_amqp_message_refused_by_a_held_claim_is_requeued_and_applied_once_released() {
    let confirms = TestQueue::declare("sutra-test-held-confirms").await;
    let channel = format!(
        "{{ transport: amqp, queue: {}, correlate: data.id }}",
        confirms.name
    );
    let mut held = held(&confirmed_over(&channel), |options| options.amqp()).await;

    confirms
        .publish_event(&event("confirm-1", json!({"id": "o1"})))
        .await;
    held.until_bounced("relay").await;
    let waiting = held.other.instance(&held.instance).await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");
    let counts = confirms.counts();
    assert_eq!(
        counts.ready + counts.unacknowledged,
        1,
        "the refused message is back on the queue, or held for its next try: {counts:?}"
    );

    held.release().await;
    completed_once_each(&held.other, &held.instance).await;
    confirms
        .wait_for_counts("settle the confirmation", |c| {
            c.ready == 0 && c.unacknowledged == 0
        })
        .await;
    confirms.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nats_message_refused_by_a_held_claim_is_redelivered_and_applied_once_released() {
    let confirms = TestStream::create("sutra-test-held-confirms").await;
    let channel = format!(
        "{{ transport: nats, stream: {}, subject: {}, correlate: data.id }}",
        confirms.name, confirms.subject
    );
    let mut held = held(&confirmed_over(&channel), |options| options.nats()).await;

    confirms
        .publish_binary("confirm-1", &json!({"id": "o1"}))
        .await;
    held.until_bounced("relay").await;
    let waiting = held.other.instance(&held.instance).await;
    assert_eq!(waiting["status"], "suspended", "{waiting}");

    held.release().await;
    completed_once_each(&held.other, &held.instance).await;
    let mut state = None;
    until("the confirmation is acknowledged", async || {
        state = confirms.consumer_state("sutra-held-confirms").await;
        state.is_some_and(|(_, floor, pending)| floor == 1 && pending == 0)
    })
    .await;
    confirms.delete().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timer_refused_by_a_held_claim_counts_on_the_timer_series_and_fires_once_released() {
    let mut held = held(&timed(), |options| options).await;
    let before = held.other.instance(&held.instance).await;
    assert!(
        tokens_at(&before, "timed"),
        "the timer had not fired when `a` froze: {before}"
    );

    held.until_bounced("timer").await;
    assert_eq!(
        held.other
            .metric(r#"sutra_claim_bounces_total{path="relay"}"#)
            .await,
        Some(0.0),
        "a timer is not a relay"
    );

    held.release().await;
    held.other
        .wait_for_status(&held.instance, "completed")
        .await;
    let history = held.other.history(&held.instance).await;
    assert_eq!(count_kind(&history, "timer_fired"), 1, "{history:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_step_refused_by_a_held_claim_counts_on_the_admin_series() {
    // No timer: once released, the instance waits for its confirmation, still cancellable.
    let document = confirmed_over("{ transport: http, correlate: data.id }");
    let mut held = held(&document, |options| options).await;
    let (status, body) = held
        .other
        .post(&format!("/v1/instances/{}/cancel", held.instance))
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (409, json!("SUTRA.ADMIN.CANCEL.CLAIM_HELD")),
        "{body}"
    );
    assert_eq!(
        held.other
            .metric(r#"sutra_claim_bounces_total{path="admin"}"#)
            .await,
        Some(1.0),
        "the refused cancel counted once"
    );

    held.release().await;
    let (status, body) = held
        .other
        .post(&format!("/v1/instances/{}/cancel", held.instance))
        .await;
    assert_eq!(status, 200, "released, the cancel goes through: {body}");
}

/// Whether one of the instance's tokens is at `node`.
fn tokens_at(instance: &Value, node: &str) -> bool {
    instance["tokens"]
        .as_array()
        .is_some_and(|tokens| tokens.iter().any(|t| t["node"] == node))
}
