//! The engine's background loops: the delivery dispatcher and the stuck-instance sweep, the
//! loops of lease roles `timers` and `instance-sweeper` (SPEC §6): each runs only while this
//! replica leads its role ([`crate::leadership`]).
//!
//! Asked is taken (SPEC §5.6). Every internal delivery — a due timer, a task completion, a
//! buffered message matched by a park — is a durable row before anyone claims its instance, and
//! the step that takes it deletes it in its commit. The dispatcher hands due rows to their
//! lanes. A claimant refused as busy does not drop the row: it defers it with backoff, never
//! later than one claim timeout, by which time a dead holder's claim has lapsed. The dispatcher's
//! first pass in each term is `recover`, and every sweep wakes it again, so a row asked of a
//! process that died is taken by whoever leads `timers` next. A replica that does not lead
//! `timers` leaves the rows it asks to the leader's passes, every `deliveries_poll` at most; two
//! dispatchers at once (the embedded store, where every process leads) only bounce on the claim.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sutra_core::step::{Event, TaskError};
use sutra_store::{Delivery, DeliveryKind, InstanceKey};
use tracing::{debug, info, warn};

use crate::leadership::{INSTANCE_SWEEPER, TIMERS};
use crate::metrics::{self, BouncePath};
use crate::runner::{StepRequest, Work};
use crate::{Engine, Error, fault};

/// The first look-again delay after a refusal; it doubles per refusal up to the claim timeout.
const LOOK_AGAIN_FIRST: SignedDuration = SignedDuration::from_millis(50);

/// The role loops of `timers` and `instance-sweeper`.
pub(crate) fn spawn(engine: &Arc<Engine>) -> Vec<tokio::task::JoinHandle<()>> {
    let dispatcher = Arc::clone(engine);
    let sweeper = Arc::clone(engine);
    vec![
        engine.spawn_role(TIMERS, move || dispatch_loop(Arc::clone(&dispatcher))),
        engine.spawn_role(INSTANCE_SWEEPER, move || sweep_loop(Arc::clone(&sweeper))),
    ]
}

/// Runs for as long as the term lasts. A notification sent while a pass is running is kept by
/// `Notify` as a permit, so a wake-up is never lost between passes.
async fn dispatch_loop(engine: Arc<Engine>) {
    loop {
        let pause = match engine.dispatch_due().await {
            Ok(Pass::Full) => continue,
            Ok(Pass::Drained) => engine.until_next_due().await,
            Err(error) => {
                warn!(%error, "could not read due deliveries; retrying");
                engine.config().deliveries_poll
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(pause.unsigned_abs()) => {}
            _ = engine.shared().deliveries_due.notified() => {}
        }
    }
}

async fn sweep_loop(engine: Arc<Engine>) {
    let interval = engine.config().sweep_interval.unsigned_abs();
    loop {
        tokio::time::sleep(interval).await;
        if let Err(error) = engine.sweep().await {
            // Idempotent: the next interval simply sweeps again.
            warn!(%error, "stuck-instance sweep failed; it runs again next interval");
        }
    }
}

enum Pass {
    /// A whole batch was due: look again at once.
    Full,
    Drained,
}

impl Engine {
    async fn dispatch_due(&self) -> Result<Pass, Error> {
        let batch = self.config().deliveries_batch;
        let due = self.store().due_deliveries(batch).await?;
        let full = due.len() as u32 == batch;
        // Every due row is in flight before the next look, so no row is dispatched twice by
        // this replica; two replicas racing for one row are serialized by the claim.
        futures_util::future::join_all(due.into_iter().map(|delivery| self.take(delivery))).await;
        Ok(if full { Pass::Full } else { Pass::Drained })
    }

    async fn until_next_due(&self) -> SignedDuration {
        let poll = self.config().deliveries_poll;
        match self.store().next_due().await {
            Ok(Some(due)) => due
                .duration_since(Timestamp::now())
                .clamp(SignedDuration::ZERO, poll),
            Ok(None) => poll,
            Err(error) => {
                warn!(%error, "could not read the next due delivery");
                poll
            }
        }
    }

    /// Takes one delivery: a step on its instance's lane that consumes the row in its commit.
    async fn take(&self, delivery: Delivery) {
        if matches!(delivery.kind, DeliveryKind::Timer) {
            fault::point("timer-fire");
        }
        let key = InstanceKey {
            tenant: delivery.tenant.clone(),
            id: delivery.instance.clone(),
        };
        let work = Work::Resume {
            event: event_for(&delivery),
            taken: Some(delivery.id),
            consumed: None,
        };
        match self
            .run_on_lane(StepRequest {
                key,
                work,
                hold: false,
            })
            .await
        {
            Ok(_) => {}
            Err(Error::Stale(reason)) => {
                debug!(delivery = delivery.id.0, %reason, "stale delivery discarded")
            }
            Err(Error::NotFound(_)) => self.discard(&delivery).await,
            Err(Error::Busy) => {
                metrics::claim_bounce(BouncePath::Timer);
                self.look_again(&delivery).await
            }
            Err(error) => {
                warn!(delivery = delivery.id.0, instance = %delivery.instance, %error, "delivery failed; will look again");
                self.look_again(&delivery).await;
            }
        }
    }

    /// Seed 004: a claim that refused us has lapsed one claim timeout later if its holder was
    /// dead, so the next attempt is never scheduled later than that.
    async fn look_again(&self, delivery: &Delivery) {
        let doubled = LOOK_AGAIN_FIRST.saturating_mul(1 << delivery.attempts.min(20));
        let delay = doubled.min(self.config().claim_timeout);
        let until = Timestamp::now()
            .saturating_add(delay)
            .unwrap_or(Timestamp::MAX);
        if let Err(error) = self.store().defer(delivery.id, until).await {
            // Still durable and due: the next pass (or `recover` after a restart) takes it.
            warn!(delivery = delivery.id.0, %error, "could not defer a refused delivery");
        }
    }

    async fn discard(&self, delivery: &Delivery) {
        if let Err(error) = self.store().discard(delivery.id).await {
            warn!(delivery = delivery.id.0, %error, "could not discard a delivery for a missing instance");
        }
    }

    /// Clears lapsed claims, fails poisoned instances, then runs `recover`.
    pub(crate) async fn sweep(&self) -> Result<(), Error> {
        let config = self.config();
        let outcome = self
            .store()
            .sweep(config.claim_timeout, config.max_recoveries)
            .await?;
        metrics::sweeps_cleared(outcome.cleared);
        if outcome.cleared > 0 {
            info!(
                cleared = outcome.cleared,
                "stuck-instance sweep cleared lapsed claims"
            );
        }
        for key in &outcome.poisoned {
            match self.poison(key).await {
                Ok(()) => {
                    warn!(instance = %key.id, "instance failed as poisoned: its steps keep dying")
                }
                Err(error) => {
                    warn!(instance = %key.id, %error, "could not fail a poisoned instance; next sweep retries")
                }
            }
        }
        self.shared().deliveries_due.notify_one();
        Ok(())
    }
}

fn event_for(delivery: &Delivery) -> Event {
    let park = delivery.park;
    match &delivery.kind {
        DeliveryKind::Timer => Event::TimerFired { park },
        DeliveryKind::Relay { message } => Event::Relay {
            park,
            message: message.clone(),
        },
        DeliveryKind::TaskCompleted { output } => Event::TaskCompleted {
            park,
            output: output.clone(),
        },
        DeliveryKind::TaskFailed { code, message } => Event::TaskFailed {
            park,
            error: TaskError {
                code: code.clone(),
                message: message.clone(),
            },
        },
        DeliveryKind::TaskExhausted { code, message } => Event::TaskExhausted {
            park,
            error: TaskError {
                code: code.clone(),
                message: message.clone(),
            },
        },
    }
}
