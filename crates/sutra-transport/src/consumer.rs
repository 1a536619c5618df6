//! Broker consumers (SPEC §5.1–§5.3, §6): how a message on a broker channel comes in.
//!
//! A [`Subscription`] is one channel this replica reads: an AMQP queue ([`crate::amqp_consumer`])
//! or a NATS JetStream durable pull consumer ([`crate::nats_consumer`]). Each message is decoded
//! as a CloudEvent and handed to the [`Receiver`] — the server's, which runs intake — whose
//! [`Verdict`] the consumer carries out on the broker: acknowledge, negatively acknowledge for
//! redelivery, or reject so that the broker's dead-letter handling takes it.
//!
//! The acknowledgement comes only after the receiver answered, and the receiver answers only
//! after the consuming step committed ("reply implies committed"), so a crash between the two
//! redelivers a message whose id the inbox already holds: a dedup hit, applied once.
//!
//! Backpressure is the broker's bound on unacknowledged messages (`prefetch`,
//! `max-ack-pending`): a consumer never holds more than that many, however slow the lanes are.
//! A connection that fails, or a consumer the broker cancels, is made again with backoff; what
//! the consumer held unacknowledged goes back to the broker with the connection.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, Stream, StreamExt};
use sutra_core::model::{Ack, Channel, Transport};
use sutra_core::step::Message;
use tracing::{info, warn};

use crate::broker::redacted;

/// One broker channel a replica consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub tenant: String,
    pub channel: String,
    pub source: Source,
}

/// Where a channel's messages are read, as its definition says. Two definitions with the same
/// source need no new consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Amqp(AmqpSource),
    Nats(NatsSource),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmqpSource {
    pub queue: String,
    pub prefetch: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsSource {
    pub stream: String,
    /// Only the messages of this subject, when the channel names one.
    pub subject: Option<String>,
    /// The durable consumer's name.
    pub consumer: String,
    pub max_ack_pending: i64,
    /// Made when missing; else the operator's, and a missing one is not consumed.
    pub create: bool,
    /// How long a delivered message may stay unacknowledged before JetStream redelivers it:
    /// past the channel's `ack-timeout` when the acknowledgement waits for the instance.
    pub ack_wait: Duration,
}

/// JetStream's own default acknowledgement wait, and how much longer than the channel's
/// `ack-timeout` it waits when the acknowledgement is held for the instance's end.
const ACK_WAIT: Duration = Duration::from_secs(30);

impl Subscription {
    /// The subscription of `channel`, declared by deployment `deployment`; `None` for a channel
    /// no broker carries in (HTTP, or a broker channel with no queue or stream).
    pub fn of(tenant: &str, deployment: &str, channel: &Channel) -> Option<Subscription> {
        let source = match channel.transport {
            Transport::Http => return None,
            Transport::Amqp => Source::Amqp(AmqpSource {
                queue: channel.queue.clone()?,
                prefetch: u16::try_from(channel.prefetch).unwrap_or(u16::MAX),
            }),
            Transport::Nats => Source::Nats(NatsSource {
                stream: channel.stream.clone()?,
                subject: channel.subject.clone(),
                consumer: channel
                    .consumer
                    .clone()
                    .unwrap_or_else(|| format!("sutra-{deployment}-{}", channel.name)),
                max_ack_pending: i64::from(channel.max_ack_pending),
                create: channel.create_consumer,
                ack_wait: match channel.ack {
                    Ack::Complete => channel.ack_timeout.unsigned_abs() + ACK_WAIT,
                    Ack::Commit => ACK_WAIT,
                },
            }),
        };
        Some(Subscription {
            tenant: tenant.to_owned(),
            channel: channel.name.clone(),
            source,
        })
    }

    pub fn transport(&self) -> Transport {
        match self.source {
            Source::Amqp(_) => Transport::Amqp,
            Source::Nats(_) => Transport::Nats,
        }
    }

    fn key(&self) -> (String, String) {
        (self.tenant.clone(), self.channel.clone())
    }
}

/// What becomes of one delivered message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Consumed (or consumed before): acknowledged.
    Ack,
    /// Not taken now, and safe to offer again: a held claim, a store outage, an instance still
    /// running past the acknowledgement's wait. Redelivered after `after`.
    Requeue { after: Duration, reason: String },
    /// Never takeable: not a CloudEvent, invalid for the channel, or nobody's. Rejected without
    /// requeue, so the queue's dead-letter exchange (or, on NATS, the termination advisory)
    /// takes it.
    Reject { reason: String },
}

/// Where a consumer hands what it reads: intake, on the server.
#[async_trait::async_trait]
pub trait Receiver: Send + Sync + 'static {
    /// The largest body taken (`sutra.intake.max-bytes`); a larger one is refused undecoded.
    fn max_bytes(&self) -> usize;

    /// Takes a delivered message, or the reason it is not a CloudEvent; answers once whatever
    /// it consumed has committed.
    async fn receive(
        &self,
        subscription: &Subscription,
        message: Result<Message, String>,
    ) -> Verdict;
}

/// How each consumer of this replica is doing, for readiness.
#[derive(Default)]
pub struct Health {
    consumers: Mutex<BTreeMap<(String, String), State>>,
}

/// One consumer's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    Connecting,
    Consuming,
    /// The broker cannot be reached, or refused the consumer: why, fit to be shown.
    Unreachable(String),
}

/// A channel whose consumer is not consuming.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stalled {
    pub tenant: String,
    pub channel: String,
    pub reason: String,
}

impl Health {
    /// The channels whose broker cannot be reached.
    pub fn stalled(&self) -> Vec<Stalled> {
        self.lock()
            .iter()
            .filter_map(|((tenant, channel), state)| match state {
                State::Unreachable(reason) => Some(Stalled {
                    tenant: tenant.clone(),
                    channel: channel.clone(),
                    reason: reason.clone(),
                }),
                _ => None,
            })
            .collect()
    }

    pub(crate) fn set(&self, subscription: &Subscription, state: State) {
        self.lock().insert(subscription.key(), state);
    }

    fn forget(&self, subscription: &Subscription) {
        self.lock().remove(&subscription.key());
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<(String, String), State>> {
        self.consumers
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Removes a consumer from [`Health`] when it stops, however it stops: a consumer is stopped by
/// dropping its future.
struct Registered<'a> {
    health: &'a Health,
    subscription: &'a Subscription,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.health.forget(self.subscription);
    }
}

/// The first wait before connecting again, doubled after each failure up to [`BACKOFF_MAX`].
const BACKOFF_FIRST: Duration = Duration::from_millis(500);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Consumes `subscription` from the broker at `url` (`None`: this replica has none configured),
/// handing each message to `receiver`, until dropped. A lost connection is made again with
/// backoff, reset once a consumer was up.
pub async fn consume(
    url: Option<String>,
    subscription: Subscription,
    receiver: Arc<dyn Receiver>,
    health: Arc<Health>,
) {
    let _registered = Registered {
        health: &health,
        subscription: &subscription,
    };
    let transport = subscription.transport().name();
    let Some(url) = url else {
        let reason =
            format!("this replica has no {transport} broker: set sutra.transports.{transport}.url");
        warn!(channel = subscription.channel, "{reason}");
        health.set(&subscription, State::Unreachable(reason));
        return std::future::pending().await;
    };
    let mut backoff = BACKOFF_FIRST;
    loop {
        health.set(&subscription, State::Connecting);
        let ended = match &subscription.source {
            Source::Amqp(source) => {
                crate::amqp_consumer::run(&url, &subscription, source, &*receiver, &health).await
            }
            Source::Nats(source) => {
                crate::nats_consumer::run(&url, &subscription, source, &*receiver, &health).await
            }
        };
        let reason = format!("{} at {}: {}", transport, redacted(&url), ended.reason);
        warn!(
            channel = subscription.channel,
            "consumer stopped: {reason}; connecting again"
        );
        health.set(&subscription, State::Unreachable(reason));
        if ended.consumed {
            backoff = BACKOFF_FIRST;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(BACKOFF_MAX);
    }
}

/// Why a consumer stopped, and whether it had been consuming.
pub(crate) struct Ended {
    pub(crate) reason: String,
    pub(crate) consumed: bool,
}

impl Ended {
    pub(crate) fn before_consuming(reason: impl std::fmt::Display) -> Ended {
        Ended {
            reason: reason.to_string(),
            consumed: false,
        }
    }

    pub(crate) fn while_consuming(reason: impl std::fmt::Display) -> Ended {
        Ended {
            reason: reason.to_string(),
            consumed: true,
        }
    }
}

/// Settles each message `messages` delivers by `settle`, concurrently — as many at once as the
/// broker delivers, which its bound on unacknowledged messages limits — until the stream fails,
/// or ends (`ended` says why).
pub(crate) async fn settle_each<M, E, F, S>(
    messages: &mut (impl Stream<Item = Result<M, E>> + Unpin),
    settle: F,
    ended: String,
) -> Ended
where
    E: std::fmt::Display,
    F: Fn(M) -> S,
    S: Future<Output = ()>,
{
    let mut working = FuturesUnordered::new();
    loop {
        tokio::select! {
            message = messages.next() => match message {
                Some(Ok(message)) => working.push(settle(message)),
                Some(Err(error)) => return Ended::while_consuming(error),
                None => return Ended::while_consuming(ended),
            },
            Some(()) = working.next(), if !working.is_empty() => {}
        }
    }
}

/// Marks `subscription` as consuming, once its consumer is up.
pub(crate) fn consuming(health: &Health, subscription: &Subscription) {
    info!(
        tenant = subscription.tenant,
        channel = subscription.channel,
        "consuming"
    );
    health.set(subscription, State::Consuming);
}

/// The CloudEvent `body` carries, by `decode`, unless it is larger than `receiver` takes.
pub(crate) fn decoded(
    receiver: &dyn Receiver,
    body: &[u8],
    decode: impl FnOnce() -> Result<Message, String>,
) -> Result<Message, String> {
    let max_bytes = receiver.max_bytes();
    if body.len() > max_bytes {
        return Err(format!(
            "the message is larger than {max_bytes} bytes (sutra.intake.max-bytes)"
        ));
    }
    decode()
}
