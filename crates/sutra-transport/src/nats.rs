//! NATS JetStream: an outbox row published to its channel's `subject` as a CloudEvents
//! structured-mode body, with the row's idempotency key as `Nats-Msg-Id`.
//!
//! The row counts as sent only when JetStream acknowledges it (`PubAck`): a stream captured the
//! subject and stored the message. A subject no stream captures is a failed send, not a silent
//! drop. The stream's duplicate window drops a resend of the same `Nats-Msg-Id` after a crash
//! between the publish and the row's mark, and answers it as a duplicate, which counts as sent.
//!
//! One client per process, connected on the first send (and again after a failed first
//! connection); once up, the client reconnects by itself. Plain `nats://` only: no TLS options
//! are configured yet.

use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream;
use sutra_core::model::Channel;
use sutra_store::{OutboxRow, SendError};
use tokio::sync::Mutex;

use crate::broker::redacted;
use crate::cloud_event::{self, cloud_event};

pub struct Nats {
    url: String,
    context: Mutex<Option<jetstream::Context>>,
}

impl Nats {
    pub fn new(url: String) -> Nats {
        Nats {
            url,
            context: Mutex::new(None),
        }
    }

    pub async fn send(&self, channel: &Channel, row: &OutboxRow) -> Result<(), SendError> {
        // The checker refuses a nats channel without a subject.
        let subject = channel
            .subject
            .as_deref()
            .ok_or_else(|| SendError(format!("nats channel `{}` has no subject", channel.name)))?;
        let context = self.context().await?;
        let mut headers = HeaderMap::new();
        headers.insert(NATS_MESSAGE_ID, row.entry.idempotency_key.as_str());
        headers.insert("content-type", cloud_event::CONTENT_TYPE);
        let body = cloud_event(row).to_string();
        let failed = |error: &dyn std::fmt::Display| {
            SendError(format!("publish to subject `{subject}`: {error}"))
        };
        let ack = context
            .publish_with_headers(subject.to_owned(), headers, body.into())
            .await
            .map_err(|error| failed(&error))?;
        ack.await.map_err(|error| failed(&error))?;
        Ok(())
    }

    async fn context(&self) -> Result<jetstream::Context, SendError> {
        let mut context = self.context.lock().await;
        if let Some(up) = context.as_ref() {
            return Ok(up.clone());
        }
        let client = async_nats::connect(self.url.as_str())
            .await
            .map_err(|error| {
                SendError(format!(
                    "cannot connect to the NATS server at {}: {error}",
                    redacted(&self.url)
                ))
            })?;
        let connected = jetstream::new(client);
        *context = Some(connected.clone());
        Ok(connected)
    }
}
