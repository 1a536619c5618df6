//! Deliveries (SPEC §5.6): asked in the instance's tenant, handed out (and marked), deferred and
//! discarded in the system's (the dispatcher serves every tenant), due times against the store's
//! clock.

use std::future::Future;

use jiff::{SignedDuration, Timestamp};
use sutra_store::codec::timestamp;
use sutra_store::{Deliveries, Delivery, DeliveryId, InstanceKey, NewDelivery, Result};

use crate::rows::DeliveryRow;
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Deliveries for SqlStore<B> {
    async fn ask(&self, delivery: &NewDelivery) -> Result<DeliveryId> {
        self.once(Scope::Tenant(&delivery.tenant), async |tx| {
            tx.insert_delivery(delivery.into()).await
        })
        .await
    }

    async fn due_deliveries(
        &self,
        limit: u32,
        redeliver_after: SignedDuration,
    ) -> Result<Vec<Delivery>> {
        let rows = self
            .once(Scope::System, async |tx| {
                tx.due_deliveries(limit, redeliver_after).await
            })
            .await?;
        rows.into_iter().map(DeliveryRow::decode).collect()
    }

    #[cfg(feature = "conformance")]
    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>> {
        let row = self
            .once(Scope::System, async |tx| tx.delivery(id).await)
            .await?;
        row.map(DeliveryRow::decode).transpose()
    }

    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()> {
        self.once(Scope::System, async |tx| tx.defer(id, until).await)
            .await
    }

    async fn fail_attempt(&self, id: DeliveryId, until: Timestamp, error: &str) -> Result<()> {
        self.once(Scope::System, async |tx| {
            tx.fail_attempt(id, until, error).await
        })
        .await
    }

    async fn discard(&self, id: DeliveryId) -> Result<()> {
        self.once(Scope::System, async |tx| tx.discard(id).await)
            .await
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let earliest = self
            .once(Scope::System, async |tx| tx.next_due().await)
            .await?;
        earliest.map(timestamp).transpose()
    }

    async fn cancelled_ancestors(
        &self,
        instances: &[InstanceKey],
    ) -> Result<Vec<(InstanceKey, String)>> {
        if instances.is_empty() {
            return Ok(Vec::new());
        }
        let found = self
            .once(Scope::System, async |tx| {
                tx.cancelled_ancestors(instances).await
            })
            .await?;
        Ok(found
            .into_iter()
            .map(|(tenant, id, ancestor)| (InstanceKey { tenant, id }, ancestor))
            .collect())
    }
}

/// The statements of the deliveries (`deliveries`); steps and the task scripts insert
/// them ([`Statements::insert_delivery`]).
pub trait DeliveryStatements: Statements {
    /// Deliveries due by the store's clock, oldest due first, each marked as handed out: one
    /// dispatch more, due again `redeliver_after` later. A row another dispatcher is marking is
    /// skipped, never handed out twice. The rows read as they came due, their dispatches
    /// counting this one.
    fn due_deliveries(
        &mut self,
        limit: u32,
        redeliver_after: SignedDuration,
    ) -> impl Future<Output = Result<Vec<DeliveryRow>>> + Send;

    fn delivery(
        &mut self,
        id: DeliveryId,
    ) -> impl Future<Output = Result<Option<DeliveryRow>>> + Send;

    /// Moves the delivery's due time to `until`, counting a refused attempt and clearing its
    /// dispatches.
    fn defer(
        &mut self,
        id: DeliveryId,
        until: Timestamp,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Moves the delivery's due time to `until`, counting a failed step, keeping its error and
    /// clearing its dispatches.
    fn fail_attempt(
        &mut self,
        id: DeliveryId,
        until: Timestamp,
        error: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    fn discard(&mut self, id: DeliveryId) -> impl Future<Output = Result<()>> + Send;

    /// The earliest due time, in microseconds.
    fn next_due(&mut self) -> impl Future<Output = Result<Option<i64>>> + Send;

    /// Each of `instances` with an ancestor whose status is `cancelled`, as (tenant, id, the
    /// nearest such ancestor): its callers, followed up the `parent` column in its tenant, at
    /// most [`ANCESTORS_MAX`] deep and no further than the first cancelled one.
    fn cancelled_ancestors(
        &mut self,
        instances: &[InstanceKey],
    ) -> impl Future<Output = Result<Vec<(String, String, String)>>> + Send;
}

/// How far up a cancelled ancestor is looked for: past any `sutra.call.max-depth` in use, and a
/// bound on the walk should a `parent` column ever be corrupt enough to loop.
pub const ANCESTORS_MAX: i64 = 1024;
