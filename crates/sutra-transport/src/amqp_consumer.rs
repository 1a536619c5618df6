//! An AMQP 0-9-1 queue consumed (RabbitMQ): the inbound half of an `amqp` channel.
//!
//! Sutra consumes the channel's `queue` and never declares it: queues, exchanges, bindings and
//! dead-letter exchanges belong to the user's infrastructure. Each consumer has a connection and
//! a channel of its own, with `basic.qos` at the channel's `prefetch`: the broker delivers no more
//! than that many unacknowledged messages, which bounds what waits for the lanes.
//!
//! Every delivery is acknowledged alone, by the [`Verdict`] intake gave: `basic.ack`;
//! `basic.nack` with requeue after the verdict's delay (RabbitMQ redelivers at once, so the
//! consumer waits instead of spinning on a held claim); `basic.reject` without requeue, which
//! dead-letters the message when the queue has a dead-letter exchange and drops it otherwise.
//! Dropping the consumer cancels it and closes its connection, which hands every message it
//! held unacknowledged back to the queue.
//!
//! A message is a CloudEvent in binary mode when it carries an id attribute as a header
//! (`cloudEvents:id`, `cloudEvents_id` — the AMQP binding's names — or `ce-id`, `ce_id`), and in
//! structured mode otherwise.

use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions, BasicRejectOptions,
};
use lapin::types::{AMQPValue, FieldTable, ShortString};
use lapin::{Connection, ConnectionProperties};
use sutra_core::step::Message;
use tracing::{debug, warn};

use crate::cloud_event;
use crate::consumer::{self, AmqpSource, Ended, Health, Receiver, Subscription, Verdict};

/// The header prefixes an attribute may come under in binary mode.
const PREFIXES: [&str; 4] = ["cloudEvents:", "cloudEvents_", "ce-", "ce_"];

pub(crate) async fn run(
    url: &str,
    subscription: &Subscription,
    source: &AmqpSource,
    receiver: &dyn Receiver,
    health: &Health,
) -> Ended {
    let AmqpSource { queue, prefetch } = source;
    let connection = match Connection::connect(url, ConnectionProperties::default()).await {
        Ok(connection) => connection,
        Err(error) => return Ended::before_consuming(format!("cannot connect: {error}")),
    };
    let consumer = async {
        let channel = connection.create_channel().await?;
        channel
            .basic_qos(*prefetch, BasicQosOptions::default())
            .await?;
        channel
            .basic_consume(
                ShortString::from(queue.as_str()),
                ShortString::from(""),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
    };
    let mut deliveries = match consumer.await {
        Ok(deliveries) => deliveries,
        Err(error) => {
            return Ended::before_consuming(format!("cannot consume queue `{queue}`: {error}"));
        }
    };
    consumer::consuming(health, subscription);
    let settled = |delivery| settle(delivery, subscription, receiver);
    let cancelled = format!("the broker cancelled the consumer of queue `{queue}`");
    consumer::settle_each(&mut deliveries, settled, cancelled).await
}

/// Hands one delivery to intake and carries out its verdict.
async fn settle(delivery: Delivery, subscription: &Subscription, receiver: &dyn Receiver) {
    let body = &delivery.data;
    let message = consumer::decoded(receiver, body, || decode(&delivery.properties, body));
    let verdict = receiver.receive(subscription, message).await;
    let acker = &delivery.acker;
    let done = match &verdict {
        Verdict::Ack => acker.ack(BasicAckOptions::default()).await,
        Verdict::Requeue { after, reason } => {
            debug!(channel = subscription.channel, reason, "requeued");
            tokio::time::sleep(*after).await;
            let requeue = BasicNackOptions {
                requeue: true,
                ..BasicNackOptions::default()
            };
            acker.nack(requeue).await
        }
        Verdict::Reject { reason } => {
            warn!(
                channel = subscription.channel,
                reason, "rejected: the queue's dead-letter exchange takes it, if it has one"
            );
            acker.reject(BasicRejectOptions { requeue: false }).await
        }
    };
    if let Err(error) = done {
        // The channel went away: the broker redelivers the message, and its id is a dedup hit
        // if it was consumed.
        warn!(channel = subscription.channel, %error, ?verdict, "could not settle a delivery");
    }
}

/// The CloudEvent a delivery carries.
pub fn decode(properties: &lapin::BasicProperties, body: &[u8]) -> Result<Message, String> {
    let headers = properties.headers().as_ref();
    let attribute = |name: &str| -> Result<Option<String>, String> {
        let Some(headers) = headers else {
            return Ok(None);
        };
        let found = PREFIXES.iter().find_map(|prefix| {
            let header = format!("{prefix}{name}");
            headers
                .inner()
                .iter()
                .find(|(key, _)| key.as_str() == header)
                .map(|(_, value)| (header, value))
        });
        match found {
            None => Ok(None),
            Some((_, AMQPValue::LongString(text))) => String::from_utf8(text.as_bytes().to_vec())
                .map(Some)
                .map_err(|_| format!("header {name} is not valid UTF-8")),
            Some((_, AMQPValue::ShortString(text))) => Ok(Some(text.as_str().to_owned())),
            Some((header, _)) => Err(format!("header {header} must be a string")),
        }
    };
    cloud_event::decode(attribute, body)
}

#[cfg(test)]
mod tests {
    use lapin::BasicProperties;
    use lapin::types::LongString;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> BasicProperties {
        let mut table = FieldTable::default();
        for (name, value) in pairs {
            table.insert(
                ShortString::from(*name),
                AMQPValue::LongString(LongString::from(*value)),
            );
        }
        BasicProperties::default().with_headers(table)
    }

    #[test]
    fn binary_mode_reads_the_amqp_bindings_headers() {
        let properties = headers(&[
            ("cloudEvents:specversion", "1.0"),
            ("cloudEvents:id", "e1"),
            ("cloudEvents:type", "t"),
            ("cloudEvents:source", "s"),
        ]);
        let message = decode(&properties, br#"{"a":1}"#).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["a"].as_i64()),
            ("e1", Some(1))
        );
    }

    #[test]
    fn binary_mode_reads_ce_headers_too() {
        let properties = headers(&[
            ("ce-specversion", "1.0"),
            ("ce-id", "e2"),
            ("ce-type", "t"),
            ("ce-source", "s"),
        ]);
        assert_eq!(decode(&properties, b"").unwrap().id, "e2");
    }

    #[test]
    fn without_attribute_headers_the_body_is_the_event() {
        let body = br#"{"specversion":"1.0","id":"e3","type":"t","source":"s","data":{}}"#;
        assert_eq!(decode(&BasicProperties::default(), body).unwrap().id, "e3");
        let error = decode(&BasicProperties::default(), b"<xml/>").unwrap_err();
        assert!(error.contains("not valid JSON"), "{error}");
    }
}
