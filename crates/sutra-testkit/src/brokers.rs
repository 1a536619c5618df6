//! Each test's own queue on the machine's RabbitMQ and stream on its NATS JetStream
//! (`SUTRA_TEST_AMQP_URL`, `SUTRA_TEST_NATS_URL`, defaulting to the brokers' standard local
//! ports), uniquely named, written and read back the way a producer and a consumer would, and
//! removed by the test. A broker that is not running fails the test: `.ci/run` starts both, and
//! a test never skips.
//!
//! What a queue holds unacknowledged, and who consumes it, is read from the broker's side
//! (`rabbitmqctl`), not from what Sutra says of itself.

use std::time::{Duration, Instant};

use std::process::Command;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, consumer, message::StreamMessage, stream};
use lapin::message::Delivery;
use lapin::options::{
    BasicGetOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};

/// Far longer than a publish takes: what never arrives fails the test after it.
const PATIENCE: Duration = Duration::from_secs(20);

pub fn amqp_url() -> String {
    std::env::var("SUTRA_TEST_AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

pub fn nats_url() -> String {
    std::env::var("SUTRA_TEST_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// `{prefix}-{a fresh UUIDv7}`: no two tests, nor two runs, share a broker resource.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7().simple())
}

/// A queue of this test's own on RabbitMQ, with a dead-letter queue of its own when asked for.
pub struct TestQueue {
    pub name: String,
    /// Where the queue's rejected messages go: `{name}.dead`.
    pub dead_letters: Option<String>,
    /// The virtual host it is in.
    vhost: String,
    _connection: Connection,
    channel: lapin::Channel,
}

/// What RabbitMQ says a queue holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueCounts {
    pub ready: u64,
    pub unacknowledged: u64,
    pub consumers: u64,
}

impl TestQueue {
    pub async fn declare(prefix: &str) -> TestQueue {
        TestQueue::open(&amqp_url(), "/", unique(prefix), None).await
    }

    /// A queue whose rejected messages the default exchange routes to a queue `{name}.dead`.
    pub async fn declare_with_dead_letters(prefix: &str) -> TestQueue {
        let name = unique(prefix);
        let dead = format!("{name}.dead");
        TestQueue::open(&amqp_url(), "/", name, Some(dead)).await
    }

    /// A queue in `vhost`, declared afresh: a second handle on the same queue is
    /// `TestQueue::declare_in(vhost, &queue.name)` again, declaring being idempotent.
    pub async fn declare_in(vhost: &TestVhost, name: &str) -> TestQueue {
        TestQueue::open(&vhost.url, &vhost.name, name.to_owned(), None).await
    }

    async fn open(url: &str, vhost: &str, name: String, dead_letters: Option<String>) -> TestQueue {
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .expect("RabbitMQ runs on this machine (see .ci/run)");
        let channel = connection.create_channel().await.unwrap();
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        let mut arguments = FieldTable::default();
        if let Some(dead) = &dead_letters {
            declare(&channel, dead, FieldTable::default()).await;
            arguments.insert(
                ShortString::from("x-dead-letter-exchange"),
                AMQPValue::LongString(LongString::from("")),
            );
            arguments.insert(
                ShortString::from("x-dead-letter-routing-key"),
                AMQPValue::LongString(LongString::from(dead.as_str())),
            );
        }
        declare(&channel, &name, arguments).await;
        TestQueue {
            name,
            dead_letters,
            vhost: vhost.to_owned(),
            _connection: connection,
            channel,
        }
    }

    /// Publishes a structured-mode CloudEvent to the queue, persistent, and waits for the
    /// broker's confirm.
    pub async fn publish_event(&self, event: &serde_json::Value) {
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/cloudevents+json"))
            .with_delivery_mode(2);
        self.publish(event.to_string().as_bytes(), properties).await;
    }

    /// Publishes `body` with `properties` to the queue and waits for the broker's confirm.
    pub async fn publish(&self, body: &[u8], properties: BasicProperties) {
        self.channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(self.name.clone()),
                BasicPublishOptions::default(),
                body,
                properties,
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// The next message of the dead-letter queue; waits for one up to [`PATIENCE`].
    pub async fn next_dead_letter(&self) -> Delivery {
        let dead = self
            .dead_letters
            .as_deref()
            .expect("a queue with dead letters");
        next(&self.channel, dead).await
    }

    /// What RabbitMQ says the queue holds, and how many consume it.
    pub fn counts(&self) -> QueueCounts {
        let listed = rabbitmqctl(&[
            "list_queues",
            "-p",
            &self.vhost,
            "name",
            "messages_ready",
            "messages_unacknowledged",
            "consumers",
        ]);
        let row = listed
            .iter()
            .find(|row| row.first() == Some(&self.name))
            .unwrap_or_else(|| panic!("rabbitmqctl lists no queue {}: {listed:?}", self.name));
        let number = |i: usize| row[i].parse::<u64>().unwrap();
        QueueCounts {
            ready: number(1),
            unacknowledged: number(2),
            consumers: number(3),
        }
    }

    /// Polls [`TestQueue::counts`] until `done` holds, failing the test after [`PATIENCE`].
    pub async fn wait_for_counts(
        &self,
        what: &str,
        done: impl Fn(QueueCounts) -> bool,
    ) -> QueueCounts {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let counts = self.counts();
            if done(counts) {
                return counts;
            }
            assert!(
                Instant::now() < deadline,
                "queue {} did not {what}: {counts:?}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The next message, taken off the queue; waits for one up to [`PATIENCE`].
    pub async fn next(&self) -> Delivery {
        next(&self.channel, &self.name).await
    }

    pub async fn delete(self) {
        for queue in std::iter::once(self.name).chain(self.dead_letters) {
            self.channel
                .queue_delete(ShortString::from(queue), QueueDeleteOptions::default())
                .await
                .unwrap();
        }
    }
}

/// A RabbitMQ virtual host of this test's own, so that a fault the test injects there — every
/// connection closed by the broker — reaches no other test.
pub struct TestVhost {
    pub name: String,
    /// The AMQP URL of the vhost, as guest.
    pub url: String,
}

impl TestVhost {
    pub fn create(prefix: &str) -> TestVhost {
        let name = unique(prefix);
        rabbitmqctl(&["add_vhost", &name]);
        rabbitmqctl(&["set_permissions", "-p", &name, "guest", ".*", ".*", ".*"]);
        let url = format!("amqp://guest:guest@127.0.0.1:5672/{name}");
        TestVhost { name, url }
    }

    /// The broker closes every connection to the vhost, as it does when it restarts.
    pub fn close_connections(&self) {
        rabbitmqctl(&[
            "close_all_connections",
            "--vhost",
            &self.name,
            "sutra test: the broker drops its connections",
        ]);
    }

    /// Removes the vhost, its queues and their messages.
    pub fn delete(self) {
        rabbitmqctl(&["delete_vhost", &self.name]);
    }
}

async fn declare(channel: &lapin::Channel, queue: &str, arguments: FieldTable) {
    channel
        .queue_declare(
            ShortString::from(queue),
            QueueDeclareOptions::default(),
            arguments,
        )
        .await
        .unwrap();
}

async fn next(channel: &lapin::Channel, queue: &str) -> Delivery {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let got = channel
            .basic_get(ShortString::from(queue), BasicGetOptions { no_ack: true })
            .await
            .unwrap();
        if let Some(got) = got {
            return got.delivery;
        }
        assert!(Instant::now() < deadline, "nothing reached queue {queue}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `rabbitmqctl`; the rows a `list_*` command lists, tab-separated, without headers.
fn rabbitmqctl(arguments: &[&str]) -> Vec<Vec<String>> {
    let listing = arguments
        .first()
        .is_some_and(|command| command.starts_with("list_"));
    let output = Command::new("rabbitmqctl")
        .arg("-q")
        .args(listing.then_some("--no-table-headers"))
        .args(arguments)
        .output()
        .expect("rabbitmqctl runs on this machine (see .ci/run)");
    assert!(
        output.status.success(),
        "rabbitmqctl {arguments:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.split('\t').map(str::to_owned).collect())
        .collect()
}

/// A stream of this test's own on NATS JetStream, capturing one subject of its own.
pub struct TestStream {
    pub name: String,
    pub subject: String,
    client: async_nats::Client,
    context: jetstream::Context,
    stream: stream::Stream,
}

impl TestStream {
    pub async fn create(prefix: &str) -> TestStream {
        let client = async_nats::connect(nats_url())
            .await
            .expect("NATS runs on this machine (see .ci/run)");
        let context = jetstream::new(client.clone());
        let name = unique(prefix).to_uppercase();
        let subject = format!("{}.events", name.to_lowercase());
        let stream = context
            .create_stream(stream::Config {
                name: name.clone(),
                subjects: vec![subject.clone()],
                allow_direct: true,
                max_age: Duration::from_secs(600),
                ..stream::Config::default()
            })
            .await
            .unwrap();
        TestStream {
            name,
            subject,
            client,
            context,
            stream,
        }
    }

    /// Message `sequence` (from 1); waits for it up to [`PATIENCE`].
    pub async fn message(&self, sequence: u64) -> StreamMessage {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(message) = self.stream.direct_get(sequence).await {
                return message;
            }
            assert!(
                Instant::now() < deadline,
                "nothing reached stream {}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Publishes `body` with `headers` to the stream's subject and waits for JetStream's ack.
    pub async fn publish(&self, headers: HeaderMap, body: Vec<u8>) {
        self.context
            .publish_with_headers(self.subject.clone(), headers, body.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }

    /// Publishes a binary-mode CloudEvent: its attributes as `ce-*` headers, `data` the body.
    pub async fn publish_binary(&self, id: &str, data: &serde_json::Value) {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("ce-specversion", "1.0"),
            ("ce-id", id),
            ("ce-type", "test.event"),
            ("ce-source", "sutra-testkit"),
        ] {
            headers.insert(name, value);
        }
        self.publish(headers, data.to_string().into_bytes()).await;
    }

    /// What JetStream says of a consumer of the stream: `(delivered, acknowledged floor,
    /// pending acknowledgement)` as stream sequence numbers and a count.
    pub async fn consumer_state(&self, name: &str) -> Option<(u64, u64, usize)> {
        let mut consumer: consumer::PullConsumer = self.stream.get_consumer(name).await.ok()?;
        let info = consumer.info().await.ok()?;
        Some((
            info.delivered.stream_sequence,
            info.ack_floor.stream_sequence,
            info.num_ack_pending,
        ))
    }

    /// JetStream's advisories of messages that consumer `consumer` of the stream terminated:
    /// what a dead-letter watcher subscribes to.
    pub async fn terminations(&self, consumer: &str) -> async_nats::Subscriber {
        let subject = format!(
            "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{}.{consumer}",
            self.name
        );
        let subscriber = self.client.subscribe(subject).await.unwrap();
        // The subscription is in place at the server before anything is terminated.
        self.client.flush().await.unwrap();
        subscriber
    }

    /// The next termination advisory `terminations` hears, as JSON: JetStream's word that a
    /// message was dead-lettered. Fails the test if none comes within 20 s.
    pub async fn next_termination(terminations: &mut async_nats::Subscriber) -> serde_json::Value {
        use futures_util::StreamExt;
        let advisory = tokio::time::timeout(Duration::from_secs(20), terminations.next())
            .await
            .expect("JetStream tells of the terminated message")
            .expect("the advisory subscription is open");
        serde_json::from_slice(&advisory.payload).expect("an advisory is JSON")
    }

    /// How many messages the stream holds.
    pub async fn stored(&mut self) -> u64 {
        self.stream.info().await.unwrap().state.messages
    }

    pub async fn delete(self) {
        self.context.delete_stream(&self.name).await.unwrap();
    }
}
