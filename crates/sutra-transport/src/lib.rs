//! Sutra's outbound transports: how an outbox row leaves the process (SPEC §5.4).
//!
//! The engine knows no transport; its outbox worker sends through
//! [`sutra_store::Sender`]. [`Transports`] is the sender the server wires in: it sends
//! each row over its channel's transport.
//!
//! Only HTTP webhooks are built ([`webhook`]). A row for an `amqp` or `nats` channel fails with
//! a reason that says so, and backs off like any failed send: it is poisoned only if its channel
//! sets `max-attempts`, so nothing emitted is lost — the rows wait, visible, for a build that has
//! the transport.

pub mod webhook;

use sutra_core::model::{Channel, Transport};
use sutra_store::{OutboxRow, SendError, Sender};

use crate::webhook::Webhook;

pub struct Transports {
    webhook: Webhook,
}

impl Transports {
    pub fn new() -> Result<Transports, reqwest::Error> {
        Ok(Transports {
            webhook: Webhook::new()?,
        })
    }
}

#[async_trait::async_trait]
impl Sender for Transports {
    async fn send(&self, channel: &Channel, row: &OutboxRow) -> Result<(), SendError> {
        match channel.transport {
            Transport::Http => self.webhook.send(channel, row).await,
            Transport::Amqp => Err(unavailable("amqp")),
            Transport::Nats => Err(unavailable("nats")),
        }
    }
}

fn unavailable(transport: &str) -> SendError {
    SendError(format!(
        "the {transport} transport is not available in this build"
    ))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use sutra_store::{OutboxEntry, OutboxId};

    use super::*;

    const CHANNELS: &str = r#"
name: shop
channels:
  orders:
    transport: http
  bus:
    transport: amqp
    queue: shop.events
  stream:
    transport: nats
    subject: shop.events
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: to-bus
        emit: { channel: bus, data: { ok: true } }
      - id: to-stream
        emit: { channel: stream, data: { ok: true } }
"#;

    fn channel(name: &str) -> Channel {
        let checked = sutra_core::check::check(CHANNELS);
        let deployment = checked.deployment.expect("the channels check");
        deployment.channels[name].clone()
    }

    fn row(channel: &str) -> OutboxRow {
        OutboxRow {
            id: OutboxId(1),
            tenant: "default".to_owned(),
            instance: "i-1".to_owned(),
            deployment: "shop".to_owned(),
            version: 1,
            entry: OutboxEntry {
                channel: channel.to_owned(),
                payload: json!({ "ok": true }),
                message_key: None,
                idempotency_key: "i-1:2:to-bus".to_owned(),
            },
            attempts: 0,
        }
    }

    #[tokio::test]
    async fn broker_channels_fail_with_a_reason_that_names_the_missing_transport() {
        let transports = Transports::new().unwrap();
        for (name, transport) in [("bus", "amqp"), ("stream", "nats")] {
            let failed = transports.send(&channel(name), &row(name)).await;
            assert_eq!(
                failed,
                Err(SendError(format!(
                    "the {transport} transport is not available in this build"
                )))
            );
        }
    }
}
