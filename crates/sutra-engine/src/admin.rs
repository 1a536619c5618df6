//! The administrative executor: cancel, restore and migrate (SPEC §7.4) and the poisoning of an instance
//! whose steps keep dying (SPEC §5.2), each one step under the replica's one admin owner,
//! `{replica}/admin` ([`Shared::admin_owner`]), which no lane can produce: a group of one, the
//! path every lane step takes ([`group::one`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use sutra_core::codes::Code;
use sutra_core::snapshot::Status;
use sutra_core::step::Event;
use sutra_store::{DeliveryKind, InstanceKey, NewDelivery, RESTORE_PARK};

use crate::error::Error;
use crate::group;
use crate::metrics;
use crate::registry::Current;
use crate::request::{StepOutcome, StepRequest, Work};
use crate::runner::Stepper;
use crate::shared::Shared;

/// What came of a restore.
#[derive(Debug)]
pub enum Restored {
    /// It ran: the instance resumed.
    Now(StepOutcome),
    /// Its claim was held: the restore is asked as a delivery, taken once the claim is free.
    Asked,
}

/// The admin owner's executor: like a lane, it runs one step at a time.
pub(crate) struct Admin {
    shared: Arc<Shared>,
    live: Arc<Current>,
    /// One administrative step at a time on this replica. They all claim as the one admin owner,
    /// and the claim re-enters for the same owner: two at once would both hold the instance
    /// (docs/protocol.md, the `SharedAdminOwner` counterexample). Each is one short step, so
    /// waiting here is like waiting in a lane's queue.
    administering: tokio::sync::Mutex<()>,
}

impl Admin {
    pub(crate) fn new(shared: Arc<Shared>, live: Arc<Current>) -> Admin {
        Admin {
            shared,
            live,
            administering: tokio::sync::Mutex::new(()),
        }
    }

    /// Applies `event` to the instance as an administrative step.
    async fn step(&self, tenant: &str, id: &str, event: Event) -> Result<StepOutcome, Error> {
        let work = Work::Resume {
            event,
            taken: None,
            consumed: None,
        };
        self.run(tenant, id, work).await
    }

    /// Cancels a live instance (SPEC §7.4's distinct owner).
    pub(crate) async fn cancel(&self, tenant: &str, id: &str) -> Result<StepOutcome, Error> {
        self.step(tenant, id, Event::Cancel { reason: None }).await
    }

    /// Restores a failed instance: its parks are re-armed and the failed node runs again. One
    /// failed in its row because its snapshot could not be read (docs/decisions/0082) is first
    /// read again, its mark cleared: it then runs on as its snapshot says, and is restored as
    /// well only if that snapshot is itself failed.
    pub(crate) async fn restore(&self, tenant: &str, id: &str) -> Result<StepOutcome, Error> {
        match self.readable_again(tenant, id).await? {
            Some(status) if status != Status::Failed => Ok(StepOutcome {
                instance: id.to_owned(),
                status,
                reply: None,
                hold: None,
            }),
            _ => self.step(tenant, id, Event::Restore).await,
        }
    }

    /// Clears the row's mark that its snapshot could not be read, if it has one and the snapshot
    /// decodes now: the snapshot's status, or `None` when the row had no mark. Its deliveries,
    /// deferred meanwhile, are taken at their next attempt, one claim timeout at most. While the
    /// snapshot still does not decode, the restore is refused and nothing is written.
    async fn readable_again(&self, tenant: &str, id: &str) -> Result<Option<Status>, Error> {
        match self.shared.store.clear_unreadable(tenant, id).await {
            Ok(status) => Ok(status),
            Err(sutra_store::Error::InstanceNotFound(id)) => Err(Error::NotFound(id)),
            Err(sutra_store::Error::Corrupt(why)) => Err(Error::Unreadable(why)),
            Err(other) => Err(other.into()),
        }
    }

    /// Restores a failed instance now if its claim is free; else asks the restore as a durable
    /// delivery, which the dispatcher takes through the ordinary claim once the claim is free
    /// (SPEC §5.6): a restore that loses the race is retried, not lost. Only a failed instance
    /// is asked for: one in any other state is refused as the restore itself would be.
    pub(crate) async fn restore_or_ask(&self, tenant: &str, id: &str) -> Result<Restored, Error> {
        match self.restore(tenant, id).await {
            Ok(outcome) => Ok(Restored::Now(outcome)),
            Err(Error::Busy) => {
                let asked = NewDelivery {
                    tenant: tenant.to_owned(),
                    instance: id.to_owned(),
                    park: RESTORE_PARK,
                    kind: DeliveryKind::Restore,
                    due_at: self.shared.clock.now(),
                };
                self.shared.store.ask(&asked).await?;
                self.shared.deliveries_due.notify_one();
                Ok(Restored::Asked)
            }
            Err(other) => Err(other),
        }
    }

    /// Moves the instance onto version `to_version` of its deployment, its tokens' nodes mapped
    /// by `map` (SPEC §7.4).
    pub(crate) async fn migrate(
        &self,
        tenant: &str,
        id: &str,
        to_version: u32,
        map: BTreeMap<String, String>,
    ) -> Result<StepOutcome, Error> {
        self.run(tenant, id, Work::Migrate { to_version, map })
            .await
    }

    /// Runs `work` on the instance as one step under the admin owner.
    async fn run(&self, tenant: &str, id: &str, work: Work) -> Result<StepOutcome, Error> {
        let _one_at_a_time = self.administering.lock().await;
        let key = InstanceKey {
            tenant: tenant.to_owned(),
            id: id.to_owned(),
        };
        let owner = self.shared.admin_owner();
        let live = self.live.get();
        let stepper = Stepper {
            shared: &self.shared,
            owner: &owner,
            live: &live,
        };
        let request = StepRequest {
            key,
            work,
            hold: false,
        };
        let resumed = group::one(&stepper, request).await;
        if matches!(resumed, Err(Error::Busy)) {
            metrics::claim_bounce(metrics::BouncePath::Admin);
        }
        resumed
    }

    /// Fails an instance in place, as one administrative step: with
    /// `SUTRA.RUNTIME.STEP.POISONED` when its steps keep dying (SPEC §5.2), seen by the sweep's
    /// recoveries or a delivery's dispatches, or `SUTRA.RUNTIME.DELIVERY.EXHAUSTED` when a
    /// delivery's step kept failing (docs/decisions/0047); `detail` says which. An instance that
    /// ended or failed meanwhile has nothing to fail.
    pub(crate) async fn poison(
        &self,
        key: &InstanceKey,
        code: Code,
        detail: &str,
    ) -> Result<(), Error> {
        let work = Work::Poison {
            code,
            detail: detail.to_owned(),
        };
        match self.run(&key.tenant, &key.id, work).await {
            Ok(_) | Err(Error::InvalidState(_)) => Ok(()),
            Err(other) => Err(other),
        }
    }
}
