//! The broker transports against the real RabbitMQ and NATS JetStream on this machine
//! (`SUTRA_TEST_AMQP_URL`, `SUTRA_TEST_NATS_URL`, defaulting to the local brokers' standard
//! ports). Each test makes its own uniquely named queue or stream and removes it; a broker that
//! is not running fails the test, it never skips.

use std::time::Duration;

use async_nats::jetstream::{self, stream};
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};
use serde_json::{Value, json};
use sutra_core::model::Channel;
use sutra_store::{OutboxEntry, OutboxId, OutboxRow, Sender};
use sutra_transport::{BrokerUrls, Transports};

fn amqp_url() -> String {
    std::env::var("SUTRA_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

fn nats_url() -> String {
    std::env::var("SUTRA_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

fn transports() -> Transports {
    Transports::new(BrokerUrls {
        amqp: Some(amqp_url()),
        nats: Some(nats_url()),
    })
    .unwrap()
}

/// Channel `name` of a document that declares it with `declaration`.
fn channel(name: &str, declaration: &str) -> Channel {
    let document = format!(
        "name: shop\nchannels:\n  orders: {{ transport: http }}\n  {name}: {declaration}\n\
         flows:\n  order:\n    start: {{ channel: orders }}\n    nodes:\n      - id: out\n        \
         emit: {{ channel: {name}, data: {{ ok: true }} }}\n"
    );
    let checked = sutra_core::check::check(&document);
    let deployment = checked.deployment.unwrap_or_else(|| {
        panic!("the test document checks: {:?}", checked.diagnostics);
    });
    deployment.channels[name].clone()
}

fn row(channel: &str, key: &str) -> OutboxRow {
    OutboxRow {
        id: OutboxId(1),
        tenant: "default".to_owned(),
        instance: "0190c0de-0000-7000-8000-000000000001".to_owned(),
        deployment: "shop".to_owned(),
        version: 1,
        entry: OutboxEntry {
            channel: channel.to_owned(),
            payload: json!({ "order": "o-1" }),
            message_key: None,
            idempotency_key: key.to_owned(),
        },
        attempts: 0,
    }
}

async fn amqp_channel() -> (Connection, lapin::Channel) {
    let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
        .await
        .expect("RabbitMQ runs on this machine (see .ci/run)");
    let channel = connection.create_channel().await.unwrap();
    (connection, channel)
}

#[tokio::test]
async fn an_amqp_emit_is_a_confirmed_persistent_message_identified_by_its_idempotency_key() {
    let (_connection, broker) = amqp_channel().await;
    let queue = unique("sutra-test-emit");
    broker
        .queue_declare(
            ShortString::from(queue.clone()),
            QueueDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let bus = channel("bus", &format!("{{ transport: amqp, queue: {queue} }}"));

    let sent = transports().send(&bus, &row("bus", "i-1:2:out")).await;
    let got = broker
        .basic_get(
            ShortString::from(queue.clone()),
            BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap();
    broker
        .queue_delete(ShortString::from(queue), QueueDeleteOptions::default())
        .await
        .unwrap();

    assert_eq!(sent, Ok(()));
    let delivery = got.expect("the message is in the queue").delivery;
    let properties = &delivery.properties;
    assert_eq!(
        properties.message_id().as_ref().map(ShortString::as_str),
        Some("i-1:2:out")
    );
    assert_eq!(
        properties.content_type().as_ref().map(ShortString::as_str),
        Some("application/cloudevents+json")
    );
    assert_eq!(*properties.delivery_mode(), Some(2));
    let event: Value = serde_json::from_slice(&delivery.data).unwrap();
    assert_eq!(
        (&event["id"], &event["data"]),
        (&json!("i-1:2:out"), &json!({ "order": "o-1" }))
    );
}

#[tokio::test]
async fn an_amqp_emit_no_queue_receives_is_a_failed_send_not_a_silent_drop() {
    let nowhere = unique("sutra-test-unbound");
    let bus = channel(
        "bus",
        &format!("{{ transport: amqp, routing-key: {nowhere} }}"),
    );

    let failed = transports().send(&bus, &row("bus", "i-1:2:out")).await;

    let reason = failed.expect_err("an unroutable message is not sent").0;
    assert!(
        reason.contains("routed the message to no queue"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_nats_emit_is_stored_once_however_often_it_is_resent() {
    let client = async_nats::connect(nats_url())
        .await
        .expect("NATS runs on this machine (see .ci/run)");
    let context = jetstream::new(client);
    let name = unique("SUTRA_TEST");
    let subject = format!("{}.events", name.to_lowercase());
    let mut created = context
        .create_stream(stream::Config {
            name: name.clone(),
            subjects: vec![subject.clone()],
            allow_direct: true,
            max_age: Duration::from_secs(600),
            ..stream::Config::default()
        })
        .await
        .unwrap();
    let out = channel(
        "stream",
        &format!("{{ transport: nats, subject: {subject} }}"),
    );
    let transports = transports();

    let first = transports.send(&out, &row("stream", "i-1:2:out")).await;
    // A crash between the publish and the row's mark sends the same row again.
    let again = transports.send(&out, &row("stream", "i-1:2:out")).await;
    let stored = created.info().await.unwrap().state.messages;
    let message = created.direct_get(1).await.unwrap();
    context.delete_stream(&name).await.unwrap();

    assert_eq!((first, again), (Ok(()), Ok(())));
    assert_eq!(stored, 1, "the duplicate window drops the resend");
    assert_eq!(
        message
            .headers
            .get("Nats-Msg-Id")
            .map(|value| value.as_str()),
        Some("i-1:2:out")
    );
    let event: Value = serde_json::from_slice(&message.payload).unwrap();
    assert_eq!(event["id"], "i-1:2:out");
}

#[tokio::test]
async fn a_nats_emit_to_a_subject_no_stream_captures_is_a_failed_send() {
    let subject = format!("{}.nowhere", unique("sutra-test"));
    let out = channel(
        "stream",
        &format!("{{ transport: nats, subject: {subject} }}"),
    );

    let failed = transports().send(&out, &row("stream", "i-1:2:out")).await;

    assert!(failed.is_err(), "{failed:?}");
}

#[tokio::test]
async fn an_unreachable_broker_fails_the_send_without_showing_its_password() {
    let transports = Transports::new(BrokerUrls {
        amqp: Some("amqp://guest:s3cret@127.0.0.1:1/%2f".to_owned()),
        nats: None,
    })
    .unwrap();
    let bus = channel("bus", "{ transport: amqp, queue: anywhere }");

    let reason = transports
        .send(&bus, &row("bus", "i-1:2:out"))
        .await
        .expect_err("nothing listens on port 1")
        .0;

    assert!(
        reason.starts_with("cannot connect to the AMQP broker"),
        "{reason}"
    );
    assert!(!reason.contains("s3cret"), "{reason}");
}
