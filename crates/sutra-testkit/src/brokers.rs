//! Each test's own queue on the machine's RabbitMQ and stream on its NATS JetStream
//! (`SUTRA_TEST_AMQP_URL`, `SUTRA_TEST_NATS_URL`, defaulting to the brokers' standard local
//! ports), uniquely named, read back the way a consumer would, and removed by the test. A broker
//! that is not running fails the test: `.ci/run` starts both, and a test never skips.

use std::time::{Duration, Instant};

use async_nats::jetstream::{self, message::StreamMessage, stream};
use lapin::message::Delivery;
use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};

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

/// A queue of this test's own on RabbitMQ.
pub struct TestQueue {
    pub name: String,
    _connection: Connection,
    channel: lapin::Channel,
}

impl TestQueue {
    pub async fn declare(prefix: &str) -> TestQueue {
        let connection = Connection::connect(&amqp_url(), ConnectionProperties::default())
            .await
            .expect("RabbitMQ runs on this machine (see .ci/run)");
        let channel = connection.create_channel().await.unwrap();
        let name = unique(prefix);
        channel
            .queue_declare(
                ShortString::from(name.clone()),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        TestQueue {
            name,
            _connection: connection,
            channel,
        }
    }

    /// The next message, taken off the queue; waits for one up to [`PATIENCE`].
    pub async fn next(&self) -> Delivery {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let got = self
                .channel
                .basic_get(
                    ShortString::from(self.name.clone()),
                    BasicGetOptions { no_ack: true },
                )
                .await
                .unwrap();
            if let Some(got) = got {
                return got.delivery;
            }
            assert!(
                Instant::now() < deadline,
                "nothing reached queue {}",
                self.name
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub async fn delete(self) {
        self.channel
            .queue_delete(ShortString::from(self.name), QueueDeleteOptions::default())
            .await
            .unwrap();
    }
}

/// A stream of this test's own on NATS JetStream, capturing one subject of its own.
pub struct TestStream {
    pub name: String,
    pub subject: String,
    context: jetstream::Context,
    stream: stream::Stream,
}

impl TestStream {
    pub async fn create(prefix: &str) -> TestStream {
        let client = async_nats::connect(nats_url())
            .await
            .expect("NATS runs on this machine (see .ci/run)");
        let context = jetstream::new(client);
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

    /// How many messages the stream holds.
    pub async fn stored(&mut self) -> u64 {
        self.stream.info().await.unwrap().state.messages
    }

    pub async fn delete(self) {
        self.context.delete_stream(&self.name).await.unwrap();
    }
}
