//! Sutra's transports: how an outbox row leaves the process (SPEC §5.4), and how a message on a
//! broker channel comes in ([`consumer`], SPEC §5.1–§5.3).
//!
//! The engine knows no transport; its outbox worker sends through
//! [`sutra_store::Sender`]. [`Transports`] is the sender the server wires in: it sends
//! each row over its channel's transport — an HTTP webhook ([`webhook`]), an AMQP 0-9-1 broker
//! ([`amqp`]) or NATS JetStream ([`nats`]), each as a CloudEvents structured-mode event
//! ([`cloud_event`]) identified by the row's idempotency key.
//!
//! A broker transport is configured by its URL (`sutra.transports.amqp.url`,
//! `sutra.transports.nats.url`). A row for a broker this replica has no URL for fails with a
//! reason that says so, and backs off like any failed send: it is poisoned only if its channel
//! sets `max-attempts`, so nothing emitted is lost.

pub mod amqp;
pub mod amqp_consumer;
mod broker;
pub mod cloud_event;
pub mod consumer;
pub mod nats;
pub mod nats_consumer;
pub mod webhook;

pub use broker::redacted;

use std::path::Path;

use sutra_core::model::{Channel, Transport};
use sutra_store::{OutboxRow, SendError, Sender};

use crate::amqp::Amqp;
use crate::nats::Nats;
use crate::webhook::Webhook;

/// The broker URLs a replica is configured with. Their passwords never reach a log: `Debug`
/// shows them [`redacted`].
#[derive(Clone, Default, PartialEq)]
pub struct BrokerUrls {
    pub amqp: Option<String>,
    pub nats: Option<String>,
}

impl BrokerUrls {
    /// The brokers a URL is configured for.
    pub fn configured(&self) -> Vec<Transport> {
        [(Transport::Amqp, &self.amqp), (Transport::Nats, &self.nats)]
            .into_iter()
            .filter_map(|(transport, url)| url.is_some().then_some(transport))
            .collect()
    }
}

impl std::fmt::Debug for BrokerUrls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = |url: &Option<String>| url.as_deref().map(redacted);
        f.debug_struct("BrokerUrls")
            .field("amqp", &shown(&self.amqp))
            .field("nats", &shown(&self.nats))
            .finish()
    }
}

pub struct Transports {
    webhook: Webhook,
    amqp: Option<Amqp>,
    nats: Option<Nats>,
}

impl Transports {
    /// Connects to no broker yet: each connects on its first send. Webhooks trust the
    /// platform's roots and those of the PEM bundle `extra_roots`.
    pub fn new(brokers: BrokerUrls, extra_roots: Option<&Path>) -> Result<Transports, String> {
        Ok(Transports {
            webhook: Webhook::new(extra_roots)?,
            amqp: brokers.amqp.map(Amqp::new),
            nats: brokers.nats.map(Nats::new),
        })
    }
}

#[async_trait::async_trait]
impl Sender for Transports {
    async fn send(&self, channel: &Channel, row: &OutboxRow) -> Result<(), SendError> {
        match channel.transport {
            Transport::Http => self.webhook.send(channel, row).await,
            Transport::Amqp => match &self.amqp {
                Some(amqp) => amqp.send(channel, row).await,
                None => Err(unconfigured("amqp")),
            },
            Transport::Nats => match &self.nats {
                Some(nats) => nats.send(channel, row).await,
                None => Err(unconfigured("nats")),
            },
        }
    }
}

fn unconfigured(transport: &str) -> SendError {
    SendError(format!(
        "this replica has no {transport} broker: set sutra.transports.{transport}.url"
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
    async fn a_broker_channel_without_a_configured_broker_fails_with_a_reason_that_says_which() {
        let transports = Transports::new(BrokerUrls::default(), None).unwrap();
        for (name, transport) in [("bus", "amqp"), ("stream", "nats")] {
            let failed = transports.send(&channel(name), &row(name)).await;
            assert_eq!(
                failed,
                Err(SendError(format!(
                    "this replica has no {transport} broker: set sutra.transports.{transport}.url"
                )))
            );
        }
    }
}
