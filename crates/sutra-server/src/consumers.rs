//! The broker consumers of this replica (SPEC §5.1–§5.3, §6): which channels are consumed, and
//! what intake's answer means to the broker.
//!
//! Every channel of an active deployment that a broker carries in — an `amqp` channel with a
//! `queue`, a `nats` channel with a `stream`, that a flow starts on or a `receive` waits on —
//! has a consumer here ([`sutra_transport::consumer`]). The set follows the deployments: it is
//! compared with the live set every [`RECONCILE_EVERY`], and a consumer whose channel went away
//! or now reads elsewhere is stopped (a redeploy that keeps the source keeps the consumer). A
//! `singleton: true` channel is consumed only while this replica holds its
//! `channel:{tenant}:{channel}` lease: its consumer runs as the role's work, started at each
//! term and dropped — cancelling the consumer and handing back what it held — before the term's
//! local deadline.
//!
//! Intake's answer becomes a verdict by the code it would carry over HTTP: consumed, or
//! consumed before, is acknowledged; a code the sender may retry (a held claim, a store outage,
//! a stale wait) is requeued; any other (not a CloudEvent, invalid, nobody's) is rejected, for
//! the broker's dead-letter handling. A step that failed on its own account (a panic, answered
//! as a retryable 500) is requeued after a backoff and counted ([`failures`]): its
//! `sutra.deliveries.max-attempts`-th failure dead-letters the message (docs/decisions/0047). `ack: complete` holds the acknowledgement until the
//! instance ends; past `ack-timeout` the message is requeued, and its redelivery, a dedup hit,
//! waits for the same instance again.

mod failures;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sutra_core::model::Ack;
use sutra_core::step::Message;
use sutra_engine::intake::{Answer, Inbound, IntakeError};
use sutra_engine::leadership::channel_role;
use sutra_engine::metrics::{self, DeliveryFailure};
use sutra_engine::{Engine, fault};
use sutra_store::InstanceKey;
use sutra_transport::BrokerUrls;
use sutra_transport::consumer::{self, Health, Receiver, Source, Subscription, Verdict};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::warn;

use self::failures::{Failures, MessageKey};

use crate::http::intake::intake_problem;

/// How often the consumed channels are compared with the deployments.
const RECONCILE_EVERY: Duration = Duration::from_secs(1);

/// How long a message refused for a reason that passes waits before it is offered again: what
/// an HTTP sender is told in `Retry-After`.
const REQUEUE_AFTER: Duration = Duration::from_secs(1);

/// This replica's consumers, until [`Consumers::stop`].
pub struct Consumers {
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    supervisor: JoinHandle<()>,
}

impl Consumers {
    pub fn spawn(engine: &Arc<Engine>, brokers: BrokerUrls, max_bytes: usize) -> Consumers {
        let health = Arc::new(Health::default());
        let (stop, stopping) = watch::channel(false);
        let receiver = Arc::new(Intake {
            engine: Arc::clone(engine),
            max_bytes,
            failures: Failures::new(failures::CAPACITY),
        });
        let supervisor = tokio::spawn(supervise(
            Arc::clone(engine),
            brokers,
            receiver,
            Arc::clone(&health),
            stopping,
        ));
        Consumers {
            health,
            stop,
            supervisor,
        }
    }

    pub fn health(&self) -> Arc<Health> {
        Arc::clone(&self.health)
    }

    /// Stops every consumer: what they held unacknowledged goes back to the brokers. Call it
    /// before the engine stops, so that no message is taken that no lane would run.
    pub async fn stop(self) {
        self.stop.send_replace(true);
        let _ = self.supervisor.await;
    }
}

/// A running consumer: where it reads, and how to stop it.
struct Running {
    subscription: Subscription,
    abort: AbortHandle,
}

async fn supervise(
    engine: Arc<Engine>,
    brokers: BrokerUrls,
    receiver: Arc<Intake>,
    health: Arc<Health>,
    mut stop: watch::Receiver<bool>,
) {
    let mut running: BTreeMap<(String, String), Running> = BTreeMap::new();
    loop {
        let wanted = wanted(&engine);
        running.retain(|key, consumer| {
            let kept = wanted.get(key).map(|(subscription, _)| subscription)
                == Some(&consumer.subscription);
            if !kept {
                consumer.abort.abort();
            }
            kept
        });
        for (key, (subscription, singleton)) in wanted {
            if running.contains_key(&key) {
                continue;
            }
            let url = match subscription.source {
                Source::Amqp(_) => brokers.amqp.clone(),
                Source::Nats(_) => brokers.nats.clone(),
            };
            let receiver: Arc<dyn Receiver> = receiver.clone();
            let consume = {
                let (subscription, health) = (subscription.clone(), Arc::clone(&health));
                move || {
                    consumer::consume(
                        url.clone(),
                        subscription.clone(),
                        Arc::clone(&receiver),
                        Arc::clone(&health),
                    )
                }
            };
            let abort = if singleton {
                engine.while_leading(&channel_role(&key.0, &key.1), consume)
            } else {
                tokio::spawn(consume()).abort_handle()
            };
            running.insert(
                key,
                Running {
                    subscription,
                    abort,
                },
            );
        }
        tokio::select! {
            () = engine.clock().sleep(RECONCILE_EVERY) => {}
            _ = stop.wait_for(|stopped| *stopped) => break,
        }
    }
    for consumer in running.into_values() {
        consumer.abort.abort();
    }
}

/// The channels to consume, by tenant and channel, each with whether it is a singleton.
fn wanted(engine: &Engine) -> BTreeMap<(String, String), (Subscription, bool)> {
    let live = engine.live();
    live.consumed_broker_channels()
        .filter_map(|(tenant, deployment, channel)| {
            let subscription = Subscription::of(tenant, deployment, channel)?;
            let key = (tenant.to_owned(), channel.name.clone());
            Some((key, (subscription, channel.singleton)))
        })
        .collect()
}

/// The receiver every consumer hands its messages to: intake, as HTTP runs it.
struct Intake {
    engine: Arc<Engine>,
    max_bytes: usize,
    /// How many times each message's step failed here.
    failures: Failures,
}

#[async_trait::async_trait]
impl Receiver for Intake {
    fn max_bytes(&self) -> usize {
        self.max_bytes
    }

    async fn receive(
        &self,
        subscription: &Subscription,
        message: Result<Message, String>,
    ) -> Verdict {
        let message = match message {
            Ok(message) => message,
            Err(reason) => {
                return Verdict::Reject {
                    reason: format!("not a CloudEvent: {reason}"),
                };
            }
        };
        let key: MessageKey = (
            subscription.tenant.clone(),
            subscription.channel.clone(),
            message.id.clone(),
        );
        let inbound = Inbound {
            tenant: subscription.tenant.clone(),
            channel: subscription.channel.clone(),
            message,
            via: subscription.transport(),
        };
        let verdict = match self.engine.intake(inbound).await {
            Ok(answer) => self.acknowledged(subscription, answer).await,
            Err(error) => self.refused(&key, error),
        };
        if !matches!(verdict, Verdict::Requeue { .. }) {
            self.failures.forget(&key);
        }
        if verdict == Verdict::Ack {
            fault::point("before-broker-ack");
        }
        verdict
    }
}

impl Intake {
    /// What a refused message's code means to the broker: requeued when sending it again may
    /// help, after a backoff and counted when its step failed; dead-lettered at the ceiling.
    fn refused(&self, key: &MessageKey, error: IntakeError) -> Verdict {
        let problem = intake_problem(error);
        let code = problem.code();
        let reason = format!("{}: {}", code.code, problem.explained());
        if !code.retryable {
            return Verdict::Reject { reason };
        }
        // A held claim (409), an outage (503) or a stale wait passes by itself: not counted.
        if code.status != 500 {
            return Verdict::Requeue {
                after: REQUEUE_AFTER,
                reason,
            };
        }
        let failures = self.failures.count(key);
        let config = self.engine.config();
        let (tenant, channel, message) = key;
        if failures >= config.deliveries_max_attempts {
            warn!(
                tenant,
                channel,
                message,
                attempts = failures,
                last_error = reason,
                "a broker message's step failed at every attempt: dead-lettered"
            );
            metrics::delivery_failure(DeliveryFailure::DeadLettered);
            return Verdict::Reject {
                reason: format!("dead-lettered after {failures} failed steps; the last: {reason}"),
            };
        }
        metrics::delivery_failure(DeliveryFailure::BrokerRetried);
        Verdict::Requeue {
            after: config.failure_backoff(failures).unsigned_abs(),
            reason,
        }
    }

    /// What a consumed message's answer means to the broker. A redelivery of a message whose
    /// first delivery was held for its instance's end is held again for it.
    async fn acknowledged(&self, subscription: &Subscription, answer: Answer) -> Verdict {
        match answer {
            Answer::Ended { .. } => Verdict::Ack,
            Answer::StillRunning { instance, .. } => still_running(&instance),
            Answer::Accepted {
                instance: Some(instance),
                dedup: true,
                ..
            } => {
                let Some(ack_timeout) = self.held_for(subscription) else {
                    return Verdict::Ack;
                };
                let key = InstanceKey {
                    tenant: subscription.tenant.clone(),
                    id: instance.clone(),
                };
                match self.engine.await_end(&key, ack_timeout).await {
                    Ok(Some(_)) => Verdict::Ack,
                    Ok(None) => still_running(&instance),
                    Err(error) => Verdict::Requeue {
                        after: REQUEUE_AFTER,
                        reason: format!("cannot tell whether instance {instance} ended: {error}"),
                    },
                }
            }
            Answer::Accepted { .. } => Verdict::Ack,
        }
    }

    /// The channel's `ack-timeout`, if its acknowledgement waits for the instance's end.
    fn held_for(&self, subscription: &Subscription) -> Option<Duration> {
        let route = self
            .engine
            .live()
            .route(&subscription.tenant, &subscription.channel)?;
        let channel = route.channel(&subscription.channel);
        (channel.ack == Ack::Complete).then(|| channel.ack_timeout.unsigned_abs())
    }
}

/// `ack: complete` past its `ack-timeout`: offered again at once, for its redelivery waits for
/// the instance another `ack-timeout`.
fn still_running(instance: &str) -> Verdict {
    Verdict::Requeue {
        after: Duration::ZERO,
        reason: format!("instance {instance} runs still past the channel's ack-timeout"),
    }
}
