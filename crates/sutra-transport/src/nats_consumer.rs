//! A NATS JetStream stream consumed: the inbound half of a `nats` channel.
//!
//! The stream is the user's, and must exist; the consumer is Sutra's: a durable pull consumer
//! named by the channel's `consumer` (default `sutra-{deployment}-{channel}`), filtered to its
//! `subject`, with explicit acknowledgement and `max-ack-pending` as the bound on what it holds
//! unacknowledged. It is made when missing and left as it is when it exists, so that every
//! replica consuming the channel shares one consumer and JetStream hands each message to one of
//! them — unless the channel says `create-consumer: false`: then the consumer is the operator's,
//! and a missing one is not consumed (readiness names it, and what to do). Its acknowledgement
//! wait outlasts the channel's `ack-timeout`, so a message held for its instance's end is not
//! redelivered while it is held.
//!
//! Verdicts: `+ACK`; `-NAK` with the verdict's delay, which JetStream honours; `+TERM`, which
//! ends the message's redelivery and publishes a termination advisory
//! (`$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.…`) for whoever watches for dead letters.
//!
//! A message is a CloudEvent in binary mode when it carries a `ce-id` header, and in structured
//! mode otherwise.

use async_nats::HeaderMap;
use async_nats::jetstream::{self, AckKind, consumer::AckPolicy, consumer::pull};
use sutra_core::step::Message;
use tracing::{debug, warn};

use crate::cloud_event;
use crate::consumer::{self, Ended, Health, NatsSource, Receiver, Subscription, Verdict};

pub(crate) async fn run(
    url: &str,
    subscription: &Subscription,
    source: &NatsSource,
    receiver: &dyn Receiver,
    health: &Health,
) -> Ended {
    let NatsSource {
        stream,
        subject,
        consumer: name,
        max_ack_pending,
        create,
        ack_wait,
    } = source;
    let client = match async_nats::connect(url).await {
        Ok(client) => client,
        Err(error) => return Ended::before_consuming(format!("cannot connect: {error}")),
    };
    let context = jetstream::new(client);
    let config = pull::Config {
        durable_name: Some(name.clone()),
        filter_subject: subject.clone().unwrap_or_default(),
        ack_policy: AckPolicy::Explicit,
        ack_wait: *ack_wait,
        max_ack_pending: *max_ack_pending,
        ..pull::Config::default()
    };
    let messages = async {
        let read = context
            .get_stream(stream)
            .await
            .map_err(|e| e.to_string())?;
        let consumer = if *create {
            read.get_or_create_consumer(name, config)
                .await
                .map_err(|e| e.to_string())?
        } else {
            read.get_consumer(name)
                .await
                .map_err(|e| the_operators(&e, stream, name))?
        };
        consumer.messages().await.map_err(|e| e.to_string())
    };
    let mut messages = match messages.await {
        Ok(messages) => messages,
        Err(error) => {
            return Ended::before_consuming(format!(
                "cannot consume stream `{stream}` as `{name}`: {error}"
            ));
        }
    };
    consumer::consuming(health, subscription);
    let settled = |message| settle(message, subscription, receiver);
    let ended = format!("the consumer `{name}` ended");
    consumer::settle_each(&mut messages, settled, ended).await
}

/// Why the operator's consumer (`create-consumer: false`) cannot be read, and what to do.
fn the_operators(error: &impl std::fmt::Display, stream: &str, name: &str) -> String {
    format!(
        "{error}; the channel has `create-consumer: false`, so the durable pull consumer `{name}` \
         on stream `{stream}` is the operator's to make: create it (`nats consumer add {stream} \
         {name} --pull --ack explicit`), or remove `create-consumer: false`"
    )
}

/// Hands one message to intake and carries out its verdict.
async fn settle(message: jetstream::Message, subscription: &Subscription, receiver: &dyn Receiver) {
    let body = &message.payload;
    let decoded = consumer::decoded(receiver, body, || decode(message.headers.as_ref(), body));
    let verdict = receiver.receive(subscription, decoded).await;
    let kind = match &verdict {
        Verdict::Ack => AckKind::Ack,
        Verdict::Requeue { after, reason } => {
            debug!(
                channel = subscription.channel,
                reason, "negatively acknowledged"
            );
            AckKind::Nak(Some(*after))
        }
        Verdict::Reject { reason } => {
            warn!(
                channel = subscription.channel,
                reason, "terminated: JetStream publishes a termination advisory"
            );
            AckKind::Term
        }
    };
    if let Err(error) = message.ack_with(kind).await {
        // JetStream redelivers the message after its ack wait; its id is a dedup hit if it was
        // consumed.
        warn!(channel = subscription.channel, %error, ?verdict, "could not settle a message");
    }
}

/// The CloudEvent a message carries.
pub fn decode(headers: Option<&HeaderMap>, body: &[u8]) -> Result<Message, String> {
    let attribute = |name: &str| -> Result<Option<String>, String> {
        Ok(headers
            .and_then(|headers| headers.get(format!("ce-{name}").as_str()))
            .map(|value| value.as_str().to_owned()))
    };
    cloud_event::decode(attribute, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_mode_reads_ce_headers() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("ce-specversion", "1.0"),
            ("ce-id", "e1"),
            ("ce-type", "t"),
            ("ce-source", "s"),
        ] {
            headers.insert(name, value);
        }
        let message = decode(Some(&headers), br#"{"a":1}"#).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["a"].as_i64()),
            ("e1", Some(1))
        );
        let body = br#"{"specversion":"1.0","id":"e2","type":"t","source":"s"}"#;
        assert_eq!(decode(None, body).unwrap().id, "e2");
    }
}
