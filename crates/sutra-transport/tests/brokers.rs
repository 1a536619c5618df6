//! The broker transports against the real RabbitMQ and NATS JetStream on this machine
//! (`sutra_testkit::brokers`). Each test makes its own uniquely named queue or stream and
//! removes it; a broker that is not running fails the test, it never skips.

use serde_json::{Value, json};
use sutra_core::model::Channel;
use sutra_store::{OutboxEntry, OutboxId, OutboxRow, Sender};
use sutra_testkit::brokers::{TestQueue, TestStream, amqp_url, nats_url, unique};
use sutra_transport::{BrokerUrls, Transports};

fn transports() -> Transports {
    Transports::new(
        BrokerUrls {
            amqp: Some(amqp_url()),
            nats: Some(nats_url()),
        },
        None,
    )
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

#[tokio::test]
async fn an_amqp_emit_is_a_confirmed_persistent_message_identified_by_its_idempotency_key() {
    let queue = TestQueue::declare("sutra-test-emit").await;
    let bus = channel(
        "bus",
        &format!("{{ transport: amqp, queue: {} }}", queue.name),
    );

    let sent = transports().send(&bus, &row("bus", "i-1:2:out")).await;
    let delivery = queue.next().await;
    queue.delete().await;

    assert_eq!(sent, Ok(()));
    let properties = &delivery.properties;
    assert_eq!(
        properties.message_id().as_ref().map(|id| id.as_str()),
        Some("i-1:2:out")
    );
    assert_eq!(
        properties.content_type().as_ref().map(|kind| kind.as_str()),
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
async fn an_amqp_emit_to_the_default_exchange_lands_in_the_queue_its_routing_key_names() {
    let queue = TestQueue::declare("sutra-test-default-exchange").await;
    let bus = channel(
        "bus",
        &format!(
            "{{ transport: amqp, exchange: \"\", routing-key: {} }}",
            queue.name
        ),
    );

    let sent = transports().send(&bus, &row("bus", "i-1:2:out")).await;
    let delivery = queue.next().await;
    queue.delete().await;

    assert_eq!(sent, Ok(()));
    let event: Value = serde_json::from_slice(&delivery.data).unwrap();
    assert_eq!(event["id"], "i-1:2:out");
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
    let mut stream = TestStream::create("sutra-test-emit").await;
    let out = channel(
        "stream",
        &format!("{{ transport: nats, subject: {} }}", stream.subject),
    );
    let transports = transports();

    let first = transports.send(&out, &row("stream", "i-1:2:out")).await;
    // A crash between the publish and the row's mark sends the same row again.
    let again = transports.send(&out, &row("stream", "i-1:2:out")).await;
    let stored = stream.stored().await;
    let message = stream.message(1).await;
    stream.delete().await;

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
    let transports = Transports::new(
        BrokerUrls {
            amqp: Some("amqp://guest:s3cret@127.0.0.1:1/%2f".to_owned()),
            nats: None,
        },
        None,
    )
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
