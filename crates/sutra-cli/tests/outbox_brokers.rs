//! End-to-end: the outbox (SPEC §5.4) over the brokers, against a real `sutra serve` configured
//! with the real RabbitMQ and NATS JetStream on this machine. The test declares its own uniquely
//! named queue and stream, and removes them.
//!
//! An `emit` on an amqp channel arrives in the queue, and one on a nats channel in the stream,
//! each as a CloudEvent whose `id` — and whose AMQP `message_id` or `Nats-Msg-Id` — is the row's
//! idempotency key `{instance}:{audit seq}:{node}`.

use serde_json::{Value, json};
use sutra_testkit::brokers::{TestQueue, TestStream, amqp_url, nats_url};
use sutra_testkit::{Scratch, Server, ServerOptions};

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
    let options = ServerOptions::new(env!("CARGO_BIN_EXE_sutra"), scratch.database())
        .env("SUTRA_TRANSPORTS_AMQP_URL", &amqp_url())
        .env("SUTRA_TRANSPORTS_NATS_URL", &nats_url());
    let server = Server::start(&options);
    let (status, body) = server
        .deploy(&deployment(&queue.name, &stream.subject))
        .await;
    assert_eq!(status, 201, "{body}");
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
