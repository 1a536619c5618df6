//! End-to-end: the outbox (SPEC §5.4) over the brokers, against a real `sutra serve` configured
//! with the real RabbitMQ and NATS JetStream on this machine. The test declares its own uniquely
//! named queue and stream, and removes them.
//!
//! An `emit` on an amqp channel arrives in the queue, and one on a nats channel in the stream,
//! each as a CloudEvent whose `id` — and whose AMQP `message_id` or `Nats-Msg-Id` — is the row's
//! idempotency key `{instance}:{audit seq}:{node}`.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, stream};
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};
use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, ServerOptions};

const AMQP_URL: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";
const NATS_URL: &str = "nats://127.0.0.1:4222";
/// Far longer than a send takes; a broker that never gets the message fails the test here.
const PATIENCE: Duration = Duration::from_secs(20);

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
    let amqp = Connection::connect(AMQP_URL, ConnectionProperties::default())
        .await
        .expect("RabbitMQ runs on this machine (see .ci/run)");
    let broker = amqp.create_channel().await.unwrap();
    let id = uuid::Uuid::now_v7().simple().to_string();
    let queue = format!("sutra-test-outbox-{id}");
    broker
        .queue_declare(
            ShortString::from(queue.clone()),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let nats = jetstream::new(
        async_nats::connect(NATS_URL)
            .await
            .expect("NATS runs on this machine (see .ci/run)"),
    );
    let stream_name = format!("SUTRA_TEST_OUTBOX_{id}");
    let subject = format!("sutra-test-outbox-{id}.orders");
    let stream = nats
        .create_stream(stream::Config {
            name: stream_name.clone(),
            subjects: vec![subject.clone()],
            allow_direct: true,
            max_age: Duration::from_secs(600),
            ..stream::Config::default()
        })
        .await
        .unwrap();

    let scratch = Scratch::new("outbox-brokers");
    let options = ServerOptions::new(env!("CARGO_BIN_EXE_sutra"), scratch.database())
        .env("SUTRA_TRANSPORTS_AMQP_URL", AMQP_URL)
        .env("SUTRA_TRANSPORTS_NATS_URL", NATS_URL);
    let server = Server::start(&options);
    let (status, body) = server.deploy(&deployment(&queue, &subject)).await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = server.send("orders", "evt-o1", json!({"id": "o1"})).await;
    assert_eq!(status, 202, "{body}");
    let instance = body["instance"].as_str().unwrap().to_owned();

    let deadline = Instant::now() + PATIENCE;
    let delivery = loop {
        let got = broker
            .basic_get(
                ShortString::from(queue.clone()),
                BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap();
        if let Some(got) = got {
            break got.delivery;
        }
        assert!(Instant::now() < deadline, "nothing reached queue {queue}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let published = loop {
        if let Ok(message) = stream.direct_get(1).await {
            break message;
        }
        assert!(
            Instant::now() < deadline,
            "nothing reached stream {stream_name}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    broker
        .queue_delete(ShortString::from(queue), QueueDeleteOptions::default())
        .await
        .unwrap();
    nats.delete_stream(&stream_name).await.unwrap();

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
                .map(ShortString::as_str),
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
