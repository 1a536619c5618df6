//! The broker transports against the real RabbitMQ and NATS JetStream on this machine
//! (`sutra_testkit::brokers`). Each test makes its own uniquely named queue or stream and
//! removes it; a broker that is not running fails the test, it never skips.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use serde_json::{Value, json};
use sutra_core::model::Channel;
use sutra_core::step::Message;
use sutra_store::{OutboxEntry, OutboxId, OutboxRow, Sender};
use sutra_testkit::brokers::{TestQueue, TestStream, amqp_url, nats_url, unique};
use sutra_transport::consumer::{Health, Receiver, Stalled, Subscription, Verdict, consume};
use sutra_transport::{BrokerUrls, Transports};
use tokio::sync::mpsc;

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

/// Takes every message, and tells the test its id.
struct Taken(mpsc::UnboundedSender<String>);

#[async_trait::async_trait]
impl Receiver for Taken {
    fn max_bytes(&self) -> usize {
        1 << 20
    }

    async fn receive(&self, _: &Subscription, message: Result<Message, String>) -> Verdict {
        let _ = self
            .0
            .send(message.map_or_else(|reason| reason, |message| message.id));
        Verdict::Ack
    }
}

/// The operator's consumer: a channel of `stream` that leaves it to them.
fn operators_channel(stream: &TestStream, consumer: &str) -> Channel {
    channel(
        "stream",
        &format!(
            "{{ transport: nats, subject: {}, stream: {}, consumer: {consumer}, \
             create-consumer: false }}",
            stream.subject, stream.name
        ),
    )
}

/// Consumes `channel` until the returned task is aborted.
fn consuming(
    channel: &Channel,
    health: &Arc<Health>,
) -> (tokio::task::JoinHandle<()>, mpsc::UnboundedReceiver<String>) {
    let (taken, ids) = mpsc::unbounded_channel();
    let subscription = Subscription::of("default", "shop", channel).expect("a stream is consumed");
    let task = tokio::spawn(consume(
        Some(nats_url()),
        subscription,
        Arc::new(Taken(taken)),
        Arc::clone(health),
    ));
    (task, ids)
}

#[tokio::test]
async fn a_channel_that_leaves_the_consumer_to_the_operator_names_the_missing_one_and_makes_none() {
    let stream = TestStream::create("sutra-test-theirs").await;
    let consumer = unique("missing");
    let health = Arc::new(Health::default());

    let (task, _) = consuming(&operators_channel(&stream, &consumer), &health);
    let stalled = patiently(stalled(&health)).await;
    task.abort();
    let made = stream.consumer_state(&consumer).await;
    let name = stream.name.clone();
    stream.delete().await;

    assert_eq!(made, None, "no consumer was made");
    let reason = &stalled.reason;
    for named in [
        name.as_str(),
        consumer.as_str(),
        "create-consumer: false",
        "nats consumer add",
    ] {
        assert!(reason.contains(named), "{named} in {reason}");
    }
}

#[tokio::test]
async fn a_channel_that_leaves_the_consumer_to_the_operator_reads_theirs() {
    let stream = TestStream::create("sutra-test-theirs").await;
    let consumer = unique("theirs");
    let context = jetstream::new(async_nats::connect(nats_url()).await.unwrap());
    let config = pull::Config {
        durable_name: Some(consumer.clone()),
        ack_policy: jetstream::consumer::AckPolicy::Explicit,
        ..pull::Config::default()
    };
    context
        .get_stream(&stream.name)
        .await
        .unwrap()
        .create_consumer(config)
        .await
        .unwrap();
    let health = Arc::new(Health::default());

    let (task, mut ids) = consuming(&operators_channel(&stream, &consumer), &health);
    stream.publish_binary("e-1", &json!({ "ok": true })).await;
    let taken = patiently(ids.recv()).await;
    task.abort();
    stream.delete().await;

    assert_eq!(taken.as_deref(), Some("e-1"));
}

/// What `wait` yields, which a broken consumer would make the test wait for forever.
async fn patiently<T>(wait: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), wait)
        .await
        .expect("the consumer answers within a minute")
}

/// The first channel the consumer reports stalled.
async fn stalled(health: &Health) -> Stalled {
    loop {
        if let Some(stalled) = health.stalled().into_iter().next() {
            return stalled;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
