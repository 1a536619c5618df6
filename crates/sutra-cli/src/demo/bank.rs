//! The demo's pretend bank on RabbitMQ: it answers a large transfer's approval request by
//! publishing its reply to the queue the `bank-replies` channel consumes.
//!
//! The queue is the bank's, so the bank declares it — Sutra only consumes queues — under a name
//! of this run's own, and deletes it when the demo ends. Without a reachable RabbitMQ there is
//! no bank, and the demo says so.

use std::time::Duration;

use lapin::options::{BasicPublishOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::{FieldTable, ShortString};
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde_json::json;

/// How long the demo tries to reach RabbitMQ before going on without it.
const REACH: Duration = Duration::from_secs(3);

pub struct Bank {
    pub url: String,
    pub queue: String,
    _connection: Connection,
    channel: lapin::Channel,
}

impl Bank {
    /// The bank, if RabbitMQ can be reached at `url`; else why not.
    pub async fn open(url: String) -> Result<Bank, String> {
        let connect = Connection::connect(&url, ConnectionProperties::default());
        let connection = tokio::time::timeout(REACH, connect)
            .await
            .map_err(|_| format!("no answer within {}s", REACH.as_secs()))?
            .map_err(|e| e.to_string())?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        let queue = format!("sutra-demo-{}.bank.replies", std::process::id());
        channel
            .queue_declare(
                ShortString::from(queue.clone()),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(Bank {
            url,
            queue,
            _connection: connection,
            channel,
        })
    }

    /// Publishes the bank's approval of `transfer`, a CloudEvent in structured mode.
    pub async fn approve(&self, transfer: &str) -> Result<(), String> {
        let event = json!({
            "specversion": "1.0",
            "id": format!("bank-approval-{transfer}"),
            "type": "bank.approval",
            "source": "sutra-demo-bank",
            "data": { "transferId": transfer, "approved": true },
        });
        let properties = BasicProperties::default()
            .with_content_type(ShortString::from("application/cloudevents+json"));
        self.channel
            .basic_publish(
                ShortString::from(""),
                ShortString::from(self.queue.clone()),
                BasicPublishOptions::default(),
                event.to_string().as_bytes(),
                properties,
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    /// Deletes the bank's queue.
    pub async fn close(self) {
        let _ = self
            .channel
            .queue_delete(ShortString::from(self.queue), QueueDeleteOptions::default())
            .await;
    }
}
