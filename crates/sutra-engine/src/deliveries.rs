//! The delivery dispatcher, the loop of lease role `timers` (SPEC §6): it runs only while this
//! replica leads the role ([`crate::leadership`]).
//!
//! Asked is taken (SPEC §5.6). Every internal delivery — a due timer, a task completion, a
//! buffered message matched by a park — is a durable row before anyone claims its instance, and
//! the step that takes it deletes it in its commit. The dispatcher hands due rows to their
//! lanes. A claimant refused as busy does not drop the row: it defers it with backoff, never
//! later than one claim timeout, by which time a dead holder's claim has lapsed (look-again). The
//! dispatcher's first pass in each term is `recover`, and every sweep (`sweep`) wakes it
//! again, so a row asked of a process that died is taken by whoever leads `timers` next. A
//! replica that does not lead `timers` leaves the rows it asks to the leader's passes, every
//! `deliveries_poll` at most.
//!
//! The dispatch mark (docs/decisions/0024). Each batch is handed out in one statement that
//! counts a dispatch on every row and makes it due again one claim timeout later, so two
//! dispatchers at once (the embedded store, where every process leads; a term that ended while
//! its batch ran) never hand out one row together, and a batch whose dispatcher died is due
//! again one claim timeout on. A deferral clears the count and taking deletes the row, so a
//! delivery handed out more than `max_recoveries` times went down with every dispatcher it was
//! handed to: it fails its instance as poisoned (through [`crate::admin`]) instead of being run
//! once more. This needs no durable claim, which a step that is one transaction does not leave
//! behind for the sweep to count.
//!
//! The delivery ceiling (docs/decisions/0047). A step that took a delivery and failed on its own
//! account — a panic, a row it cannot read — is no refusal: the delivery counts a failure and
//! waits `sutra.deliveries.backoff`, doubled per failure and never longer than a claim timeout,
//! and its `sutra.deliveries.max-attempts`-th failure fails the instance in place with
//! `SUTRA.RUNTIME.DELIVERY.EXHAUSTED`, naming the delivery and the last error, so that it lands
//! in the failed inbox instead of being run forever. A held claim, a store outage, a claim lost
//! to the sweep, a version not loaded yet or a shutdown pass by themselves and are not counted.
//! An instance whose snapshot cannot even be decoded cannot be failed in place (the failure is
//! written in the snapshot): the step that met it failed it in its row instead
//! (docs/decisions/0082), and its delivery is deferred at the longest backoff, uncounted and
//! logged each time, until the instance is repaired and restored.

use std::collections::HashMap;
use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use sutra_core::codes;
use sutra_core::step::{Event, TaskError};
use sutra_store::{Delivery, DeliveryKind, InstanceKey};
use tracing::{debug, warn};

use crate::admin::Admin;
use crate::error::Error;
use crate::fault;
use crate::lane::Lanes;
use crate::leadership::{RoleLoops, TIMERS};
use crate::metrics::{self, BouncePath, DeliveryFailure};
use crate::request::{StepRequest, Work};
use crate::shared::Shared;

/// The first look-again delay after a refusal; it doubles per refusal up to the claim timeout.
const LOOK_AGAIN_FIRST: SignedDuration = SignedDuration::from_millis(50);

/// The role loop of `timers`.
pub(crate) fn spawn(
    roles: &RoleLoops,
    shared: &Arc<Shared>,
    lanes: &Arc<Lanes>,
    admin: &Arc<Admin>,
) {
    let dispatcher = Arc::new(Dispatcher {
        shared: Arc::clone(shared),
        lanes: Arc::clone(lanes),
        admin: Arc::clone(admin),
    });
    roles.spawn(TIMERS, move || dispatch_loop(Arc::clone(&dispatcher)));
}

struct Dispatcher {
    shared: Arc<Shared>,
    lanes: Arc<Lanes>,
    /// Fails the instances of deliveries that keep dying, one administrative step each.
    admin: Arc<Admin>,
}

/// Runs for as long as the term lasts; its first pass is `recover`. A notification sent while a
/// pass is running is kept by `Notify` as a permit, so a wake-up is never lost between passes.
async fn dispatch_loop(dispatcher: Arc<Dispatcher>) {
    loop {
        let pause = match dispatcher.dispatch_due().await {
            Ok(Pass::Full) => continue,
            Ok(Pass::Drained) => dispatcher.until_next_due().await,
            Err(error) => {
                warn!(%error, "could not read due deliveries; retrying");
                dispatcher.shared.config.deliveries_poll
            }
        };
        tokio::select! {
            _ = dispatcher.shared.clock.sleep(pause.unsigned_abs()) => {}
            _ = dispatcher.shared.deliveries_due.notified() => {}
        }
    }
}

enum Pass {
    /// A whole batch was due: look again at once.
    Full,
    Drained,
}

impl Dispatcher {
    async fn dispatch_due(&self) -> Result<Pass, Error> {
        let config = &self.shared.config;
        let batch = config.deliveries_batch;
        let due = (self.shared.store)
            .due_deliveries(batch, config.claim_timeout)
            .await?;
        let full = due.len() as u32 == batch;
        // Every due row is in flight before the next look, so no row is dispatched twice by
        // this replica; the mark keeps other dispatchers off it for a claim timeout, and one
        // that looks later than that (a step slower than the claim timeout) meets the claim.
        // Only a called instance's start waits for the look for cancelled callers: a timer or a
        // child's answer in the same batch is dispatched at once.
        let (starts, others): (Vec<_>, Vec<_>) = (due.into_iter())
            .partition(|delivery| matches!(delivery.kind, DeliveryKind::Start { .. }));
        let others = others
            .into_iter()
            .map(|delivery| self.dispatch(delivery, None));
        tokio::join!(
            futures_util::future::join_all(others),
            self.dispatch_starts(starts)
        );
        Ok(if full { Pass::Full } else { Pass::Drained })
    }

    /// Dispatches the batch's starts once the look for cancelled callers has answered.
    async fn dispatch_starts(&self, starts: Vec<Delivery>) {
        let cancelled = self.cancelled_callers(&starts).await;
        let dispatched = starts.into_iter().map(|delivery| {
            let ancestor = cancelled.get(&instance_key(&delivery)).cloned();
            self.dispatch(delivery, ancestor)
        });
        futures_util::future::join_all(dispatched).await;
    }

    async fn until_next_due(&self) -> SignedDuration {
        let poll = self.shared.config.deliveries_poll;
        match self.shared.store.next_due().await {
            Ok(Some(due)) => due
                .duration_since(self.shared.clock.now())
                .clamp(SignedDuration::ZERO, poll),
            Ok(None) => poll,
            Err(error) => {
                warn!(%error, "could not read the next due delivery");
                poll
            }
        }
    }

    /// The called instances of `starts` whose start must be a cancel, each with its nearest
    /// cancelled caller: a subtree whose cancels are still on their way down spawns nothing more
    /// (issue 48). One look for the batch, not one per start, so that a flow calling at breadth
    /// pays a statement per batch of starts. A start whose ancestor is cancelled just after this
    /// look runs, and its children's starts find the ancestor.
    async fn cancelled_callers(&self, starts: &[Delivery]) -> HashMap<InstanceKey, String> {
        let starts: Vec<InstanceKey> = starts.iter().map(instance_key).collect();
        if starts.is_empty() {
            return HashMap::new();
        }
        match self.shared.store.cancelled_ancestors(&starts).await {
            Ok(found) => found.into_iter().collect(),
            Err(error) => {
                debug!(starts = starts.len(), %error, "could not look for cancelled callers; starting");
                HashMap::new()
            }
        }
    }

    /// Hands a delivery to its lane, unless it keeps dying there; a start under a cancelled
    /// `ancestor` as a cancel.
    async fn dispatch(&self, delivery: Delivery, ancestor: Option<String>) {
        if self.keeps_dying(&delivery) {
            self.poison(&delivery).await
        } else {
            self.take(delivery, ancestor).await
        }
    }

    /// Handed out more than `max_recoveries` times, and not one of those dispatches took or
    /// deferred it: each died with its dispatcher, as a step that kills its replica does.
    fn keeps_dying(&self, delivery: &Delivery) -> bool {
        delivery.dispatches > self.shared.config.max_recoveries
    }

    /// Fails the delivery's instance as poisoned instead of running its step once more.
    async fn poison(&self, delivery: &Delivery) {
        let died = delivery.dispatches - 1;
        let detail = format!(
            "a delivery to the instance was handed out {died} times, never taken or deferred: \
             its step kept dying with its replica"
        );
        let key = instance_key(delivery);
        match self.admin.poison(&key, codes::STEP_POISONED, &detail).await {
            // Failing the instance disarmed the delivery's park, which deleted it; an instance
            // that had ended meanwhile can never take it.
            Ok(()) => {
                warn!(delivery = delivery.id.0, instance = %delivery.instance, dispatches = delivery.dispatches, "instance failed as poisoned: a delivery to it keeps dying");
                self.discard(delivery).await
            }
            // Still marked: it is due again one claim timeout later, and poisoned then.
            Err(error) => {
                warn!(delivery = delivery.id.0, instance = %delivery.instance, %error, "could not fail a poisoned instance; retrying one claim timeout later")
            }
        }
    }

    /// Takes one delivery: a step on its instance's lane that consumes the row in its commit.
    async fn take(&self, delivery: Delivery, ancestor: Option<String>) {
        match delivery.kind {
            DeliveryKind::Timer => fault::point("timer-fire"),
            DeliveryKind::ChildEnded { .. } => fault::point("child-ended"),
            _ => {}
        }
        let key = instance_key(&delivery);
        let event = match ancestor {
            Some(ancestor) => Event::Cancel {
                reason: Some(format!(
                    "the instance {ancestor} that called it, directly or not, was cancelled"
                )),
            },
            None => event_for(&delivery),
        };
        let work = Work::Resume {
            event,
            taken: Some(delivery.id),
            consumed: None,
        };
        match self
            .lanes
            .run(StepRequest {
                key,
                work,
                hold: false,
            })
            .await
        {
            Ok(_) => {}
            Err(Error::Stale(reason) | Error::InvalidState(reason)) => {
                // A delivery that can never apply is consumed without a step, so that it is not
                // asked again forever: its park is gone, or (a restore) its instance is no longer
                // failed.
                self.discard(&delivery).await;
                debug!(delivery = delivery.id.0, %reason, "stale delivery discarded")
            }
            Err(Error::NotFound(_)) => self.discard(&delivery).await,
            Err(Error::Busy) => {
                metrics::claim_bounce(BouncePath::Timer);
                self.look_again(&delivery).await
            }
            Err(Error::Unreadable(why)) => self.unreadable(&delivery, &why).await,
            Err(error) if !is_step_failure(&error) => {
                debug!(delivery = delivery.id.0, instance = %delivery.instance, %error, "delivery not taken; will look again");
                self.look_again(&delivery).await;
            }
            Err(error) => self.failed(&delivery, &error.to_string()).await,
        }
    }

    /// The delivery's step failed on its own account: tried again after a backoff, or, at the
    /// ceiling, its instance failed in place.
    async fn failed(&self, delivery: &Delivery, error: &str) {
        let config = &self.shared.config;
        let failures = delivery.failures.saturating_add(1);
        if failures >= config.deliveries_max_attempts {
            return self.exhaust(delivery, failures, error).await;
        }
        warn!(delivery = delivery.id.0, instance = %delivery.instance, failures, %error, "a delivery's step failed; it will be tried again");
        metrics::delivery_failure(DeliveryFailure::Retried);
        self.fail_attempt(delivery, config.failure_backoff(failures), error)
            .await
    }

    /// Fails the delivery's instance with `SUTRA.RUNTIME.DELIVERY.EXHAUSTED`, whose detail names
    /// the delivery and its last error.
    async fn exhaust(&self, delivery: &Delivery, failures: u32, error: &str) {
        let detail = format!(
            "{} failed {failures} times; the last error: {error}. Fix the cause, then restore \
             the instance (POST /v1/instances/{}/restore)",
            describe(delivery),
            delivery.instance
        );
        let key = instance_key(delivery);
        let config = &self.shared.config;
        match self
            .admin
            .poison(&key, codes::DELIVERY_EXHAUSTED, &detail)
            .await
        {
            // Failing the instance disarmed the delivery's park, which deleted it.
            Ok(()) => {
                warn!(delivery = delivery.id.0, instance = %delivery.instance, failures, %error, "instance failed: a delivery's step failed at every attempt");
                metrics::delivery_failure(DeliveryFailure::Exhausted);
                self.discard(delivery).await
            }
            // The snapshot cannot be read any more: the instance is failed in its row.
            Err(Error::Unreadable(why)) => self.unreadable(delivery, &why).await,
            Err(other) => {
                warn!(delivery = delivery.id.0, instance = %delivery.instance, failures, error = %other, "could not fail the instance of a delivery past its ceiling; will try again");
                self.fail_attempt(delivery, config.failure_backoff(failures), error)
                    .await
            }
        }
    }

    /// The delivery's instance cannot be read, and is failed in its row (docs/decisions/0082)
    /// until an operator repairs and restores it: no step of its own failed, so nothing is
    /// counted toward the ceiling — whose end, failing the instance, is done already. It waits
    /// the longest backoff, one claim timeout, and is tried again then: slowly, and loudly.
    async fn unreadable(&self, delivery: &Delivery, why: &str) {
        warn!(delivery = delivery.id.0, instance = %delivery.instance, %why, "a delivery's instance cannot be read; deferred at the longest backoff until it is repaired and restored");
        metrics::delivery_failure(DeliveryFailure::Unreadable);
        let until = self.after(self.shared.config.claim_timeout);
        if let Err(error) = self.shared.store.defer(delivery.id, until).await {
            // Still marked: due again one claim timeout later all the same.
            warn!(delivery = delivery.id.0, %error, "could not defer a delivery to an unreadable instance");
        }
    }

    async fn fail_attempt(&self, delivery: &Delivery, backoff: SignedDuration, error: &str) {
        let until = self.after(backoff);
        if let Err(store) = self
            .shared
            .store
            .fail_attempt(delivery.id, until, error)
            .await
        {
            // Still marked: due again one claim timeout later, uncounted.
            warn!(delivery = delivery.id.0, error = %store, "could not count a delivery's failed step");
        }
    }

    fn after(&self, delay: SignedDuration) -> Timestamp {
        self.shared
            .clock
            .now()
            .saturating_add(delay)
            .unwrap_or(Timestamp::MAX)
    }

    /// Seed 004: a claim that refused us has lapsed one claim timeout later if its holder was
    /// dead, so the next attempt is never scheduled later than that. The deferral also clears
    /// the delivery's dispatches: this dispatch survived.
    async fn look_again(&self, delivery: &Delivery) {
        let doubled = LOOK_AGAIN_FIRST.saturating_mul(1 << delivery.attempts.min(20));
        let until = self.after(doubled.min(self.shared.config.claim_timeout));
        if let Err(error) = self.shared.store.defer(delivery.id, until).await {
            // Still durable and due: the next pass (or `recover` after a restart) takes it.
            warn!(delivery = delivery.id.0, %error, "could not defer a refused delivery");
        }
    }

    async fn discard(&self, delivery: &Delivery) {
        if let Err(error) = self.shared.store.discard(delivery.id).await {
            warn!(delivery = delivery.id.0, %error, "could not discard a delivery that cannot apply");
        }
    }
}

/// Whether a step failed on its own account (a panic, a row it cannot read): what the ceiling
/// counts. A refusal, an outage, a claim lost to the sweep, a version this replica has not
/// loaded yet or a shutdown pass by themselves, and are looked at again uncounted.
fn is_step_failure(error: &Error) -> bool {
    !matches!(
        error,
        Error::Busy
            | Error::Closed
            | Error::Unpinned(_)
            | Error::Store(sutra_store::Error::Unavailable(_) | sutra_store::Error::ClaimLost)
    )
}

/// The delivery as the failure's detail names it: what it carries, and the park it answers.
fn describe(delivery: &Delivery) -> String {
    let what = match &delivery.kind {
        DeliveryKind::Restore => return "a restore of the instance".to_owned(),
        DeliveryKind::Timer => "a timer",
        DeliveryKind::Relay { .. } => "a relayed message",
        DeliveryKind::TaskCompleted { .. } => "a task's completion",
        DeliveryKind::TaskFailed { .. } => "a task's failure",
        DeliveryKind::TaskExhausted { .. } => "a task's exhaustion",
        DeliveryKind::Start { .. } => return "a called instance's start".to_owned(),
        DeliveryKind::Cancel => return "a cancel of a called instance".to_owned(),
        DeliveryKind::ChildEnded { .. } => "a called instance's end",
    };
    format!("{what} delivered to park {}", delivery.park.0)
}

fn instance_key(delivery: &Delivery) -> InstanceKey {
    InstanceKey {
        tenant: delivery.tenant.clone(),
        id: delivery.instance.clone(),
    }
}

/// The event a delivery asks for.
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
        DeliveryKind::Restore => Event::Restore,
        // A called instance's first step: taken once, since a start applies only to an
        // instance not started yet, and a second dispatch is discarded as invalid.
        DeliveryKind::Start { message } => Event::Start {
            message: message.clone(),
        },
        DeliveryKind::Cancel => Event::Cancel {
            reason: Some("its caller no longer waits for it".to_owned()),
        },
        DeliveryKind::ChildEnded { child, outcome } => Event::ChildEnded {
            park,
            child: child.clone(),
            outcome: outcome.clone(),
        },
    }
}
