//! The broker side of the `amqp-start` workload: a request queue the engine consumes, a reply
//! queue its flow emits to, and the round trip a client makes through them.
//!
//! The bench plays the producer and the downstream consumer a user's system would have: it
//! declares both queues (Sutra only consumes queues, it never declares them) under names of this
//! run's own, publishes each start persistently with publisher confirms, and waits for the
//! instance's reply, which the engine publishes from its outbox once the step committed. One
//! reply consumer hands each reply to the client waiting for it. The queues are deleted when
//! the run ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Far longer than a round trip takes: a reply that never comes fails the run after it.
const PATIENCE: Duration = Duration::from_secs(60);

/// This run's queues: the requests the engine consumes and the replies it emits.
pub fn queues() -> (String, String) {
    let run = format!("sutra-bench-{}", std::process::id());
    (format!("{run}.requests"), format!("{run}.replies"))
}

/// Clients waiting for their instance's reply, by key.
type Waiting = Arc<Mutex<HashMap<String, oneshot::Sender<()>>>>;

pub struct Broker {
    _connection: Connection,
    publisher: lapin::Channel,
    requests: String,
    replies: String,
    waiting: Waiting,
    consumer: JoinHandle<()>,
}

impl Broker {
    /// Connects, declares this run's queues and starts consuming the replies.
    pub async fn open(url: &str) -> Result<Broker, String> {
        let failed = |what: &str, e: lapin::Error| format!("RabbitMQ at {url}: {what}: {e}");
        let connection = Connection::connect(url, ConnectionProperties::default())
            .await
            .map_err(|e| failed("cannot connect", e))?;
        let publisher = connection
            .create_channel()
            .await
            .map_err(|e| failed("channel", e))?;
        publisher
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| failed("confirms", e))?;
        let (requests, replies) = queues();
        for queue in [&requests, &replies] {
            publisher
                .queue_declare(
                    ShortString::from(queue.as_str()),
                    QueueDeclareOptions::default(),
                    FieldTable::default(),
                )
                .await
                .map_err(|e| failed("declare a queue", e))?;
        }
        let deliveries = publisher
            .basic_consume(
                ShortString::from(replies.as_str()),
                ShortString::from(""),
                BasicConsumeOptions {
                    no_ack: true,
                    ..BasicConsumeOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| failed("consume the replies", e))?;
        let waiting = Waiting::default();
        let consumer = tokio::spawn(hand_out(deliveries, Arc::clone(&waiting)));
        Ok(Broker {
            _connection: connection,
            publisher,
            requests,
            replies,
            waiting,
            consumer,
        })
    }

    /// How many consume the request queue: each replica does, a moment after the deploy (its
    /// consumers follow the deployments).
    pub async fn consumers(&self) -> Result<u32, String> {
        let queue = self
            .publisher
            .queue_declare(
                ShortString::from(self.requests.as_str()),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| format!("looking at queue {}: {e}", self.requests))?;
        Ok(queue.consumer_count())
    }

    /// Publishes instance `key`'s start and waits for its reply.
    pub async fn round_trip(&self, key: &str) -> Result<(), String> {
        let (told, reply) = oneshot::channel();
        lock(&self.waiting).insert(key.to_owned(), told);
        let event = json!({
            "specversion": "1.0",
            "id": format!("{key}-start"),
            "type": "sutra.bench",
            "source": "sutra-bench",
            "data": { "n": key },
        });
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/cloudevents+json"))
            .with_delivery_mode(2);
        let published = self
            .publisher
            .basic_publish(
                ShortString::from(""),
                ShortString::from(self.requests.as_str()),
                BasicPublishOptions::default(),
                event.to_string().as_bytes(),
                properties,
            )
            .await;
        let confirmed = match published {
            Ok(confirm) => confirm.await.map(|_| ()),
            Err(error) => Err(error),
        };
        if let Err(error) = confirmed {
            lock(&self.waiting).remove(key);
            return Err(format!("publishing the start of instance {key}: {error}"));
        }
        match tokio::time::timeout(PATIENCE, reply).await {
            Ok(Ok(())) => Ok(()),
            _ => {
                lock(&self.waiting).remove(key);
                Err(format!("no reply from instance {key} within {PATIENCE:?}"))
            }
        }
    }

    /// Stops consuming and deletes this run's queues.
    pub async fn close(&self) {
        self.consumer.abort();
        for queue in [&self.requests, &self.replies] {
            let _ = self
                .publisher
                .queue_delete(
                    ShortString::from(queue.as_str()),
                    QueueDeleteOptions::default(),
                )
                .await;
        }
    }
}

/// Tells each reply's waiting client, found by the key in the reply's data.
async fn hand_out(mut deliveries: lapin::Consumer, waiting: Waiting) {
    while let Some(Ok(delivery)) = deliveries.next().await {
        let event: Value = serde_json::from_slice(&delivery.data).unwrap_or_default();
        if let Some(key) = event["data"]["n"].as_str()
            && let Some(told) = lock(&waiting).remove(key)
        {
            let _ = told.send(());
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
