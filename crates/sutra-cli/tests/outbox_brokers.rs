//! End-to-end: the outbox (SPEC §5.4) over the brokers, against a real `sutra serve` configured
//! with the real RabbitMQ and NATS JetStream on this machine. The test declares its own uniquely
//! named queue and stream, and removes them.
//!
//! An `emit` on an amqp channel arrives in the queue, and one on a nats channel in the stream,
//! each as a CloudEvent whose `id` — and whose AMQP `message_id` or `Nats-Msg-Id` — is the row's
//! idempotency key `{instance}:{audit seq}:{node}`.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::brokers::{TestQueue, TestStream};
use sutra_testkit::{Scratch, Server, serve};

fn deployment(queue: &str, subject: &str) -> String {
    format!(
        r#"
name: shop
channels:
  orders: {{ transport: http, correlate: data.id }}
  bus: {{ transport: amqp, queue: {queue} }}
  stream: {{ transport: nats, subject: {subject} }}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: to-bus
        emit: {{ channel: bus, data: {{ order: "= vars.input.id" }} }}
      - id: to-stream
        emit: {{ channel: stream, data: {{ order: "= vars.input.id" }} }}
      - id: done
        end: {{}}
"#
    )
}

/// The idempotency keys of the instance's `emitted` events, by node.
async fn emitted_keys(server: &Server, instance: &str) -> Vec<(String, String)> {
    let history = server.history(instance).await;
    history
        .iter()
        .filter(|event| event["kind"] == "emitted")
        .map(|event| {
            let node = event["node"].as_str().unwrap().to_owned();
            (node.clone(), format!("{instance}:{}:{node}", event["seq"]))
        })
        .collect()
}

#[tokio::test]
async fn emits_on_broker_channels_are_published_with_the_rows_idempotency_key() {
    let queue = TestQueue::declare("sutra-test-outbox").await;
    let stream = TestStream::create("sutra-test-outbox").await;
    let scratch = Scratch::new("outbox-brokers");
    let options = serve!(scratch.database()).amqp().nats();
    let server = options
        .deployed(&deployment(&queue.name, &stream.subject))
        .await;
    let (status, body) = server.send("orders", "evt-o1", json!({"id": "o1"})).await;
    assert_eq!(status, 202, "{body}");
    let instance = body["instance"].as_str().unwrap().to_owned();

    let delivery = queue.next().await;
    let published = stream.message(1).await;
    queue.delete().await;
    stream.delete().await;

    let keys = emitted_keys(&server, &instance).await;
    let key = |node: &str| {
        keys.iter()
            .find(|(emitted, _)| emitted == node)
            .map(|(_, key)| key.clone())
            .unwrap_or_else(|| panic!("no emitted event of {node}: {keys:?}"))
    };
    let event: Value = serde_json::from_slice(&delivery.data).unwrap();
    assert_eq!(
        (
            delivery
                .properties
                .message_id()
                .as_ref()
                .map(|id| id.as_str()),
            event["id"].as_str(),
            &event["data"]
        ),
        (
            Some(key("to-bus").as_str()),
            Some(key("to-bus").as_str()),
            &json!({"order": "o1"})
        )
    );
    let event: Value = serde_json::from_slice(&published.payload).unwrap();
    assert_eq!(
        (
            published
                .headers
                .get("Nats-Msg-Id")
                .map(|value| value.as_str()),
            event["id"].as_str()
        ),
        (
            Some(key("to-stream").as_str()),
            Some(key("to-stream").as_str())
        )
    );
}

/// One emit on `channel` (declared as `declaration`), started over HTTP.
fn emitting(declaration: &str) -> String {
    format!(
        r#"
name: shop
channels:
  orders: {{ transport: http, correlate: data.id }}
  out: {declaration}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: publish
        emit: {{ channel: out, data: {{ order: "= vars.input.id" }} }}
"#
    )
}

/// Starts an instance whose one emit kills the publisher between the broker's confirm and the
/// row's mark (`after-send`), then restarts it with a claim timeout short enough that the row's
/// stale claim is taken over; returns the server that sent it again and the instance.
async fn publish_across_a_crash(scratch: &Scratch, declaration: &str) -> (Server, String) {
    let options = serve!(scratch.database())
        .amqp()
        .nats()
        .claim_timeout(Duration::from_secs(1));
    let mut doomed = options
        .clone()
        .fault("after-send")
        .deployed(&emitting(declaration))
        .await;
    // The answer races the send that kills the process.
    let _ = doomed
        .try_post_raw(
            "/v1/channels/orders/messages",
            sutra_testkit::event("evt-o1", json!({"id": "o1"})).to_string(),
        )
        .await;
    assert!(doomed.wait_for_death(), "the publish was never made");
    drop(doomed);
    let server = Server::start(&options);
    let (_, list) = server.get("/v1/instances").await;
    let instance = list["items"][0]["id"].as_str().unwrap().to_owned();
    server.wait_for_outbox(&instance, "sent").await;
    (server, instance)
}

#[tokio::test]
async fn a_publisher_killed_before_marking_the_row_sends_the_same_message_id_to_amqp_again() {
    let queue = TestQueue::declare("sutra-test-resend").await;
    let scratch = Scratch::new("outbox-amqp-after-send");
    let declaration = format!("{{ transport: amqp, queue: {} }}", queue.name);
    let (server, instance) = publish_across_a_crash(&scratch, &declaration).await;

    let (first, again) = (queue.next().await, queue.next().await);
    let key = emitted_keys(&server, &instance).await[0].1.clone();
    let id = |delivery: &lapin::message::Delivery| {
        delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.to_string())
    };
    assert_eq!(
        (id(&first), id(&again)),
        (Some(key.clone()), Some(key)),
        "published twice with one message_id, for the consumer to drop the second"
    );
    assert_eq!(first.data, again.data);
    queue.delete().await;
}

#[tokio::test]
async fn a_publisher_killed_before_marking_the_row_publishes_again_and_jetstream_drops_the_duplicate()
 {
    let mut stream = TestStream::create("sutra-test-resend").await;
    let scratch = Scratch::new("outbox-nats-after-send");
    let declaration = format!("{{ transport: nats, subject: {} }}", stream.subject);
    let (server, instance) = publish_across_a_crash(&scratch, &declaration).await;

    let key = emitted_keys(&server, &instance).await[0].1.clone();
    let stored = stream.message(1).await;
    assert_eq!(
        stored.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some(key.as_str())
    );
    assert_eq!(
        stream.stored().await,
        1,
        "the duplicate window dropped the resend"
    );
    stream.delete().await;
}
