//! Deliveries (SPEC §5.6): asked in the instance's tenant, handed out (and marked), deferred and
//! discarded in the system's (the dispatcher serves every tenant), due times against the store's
//! clock.

use jiff::{SignedDuration, Timestamp};
use sutra_store::codec::timestamp;
use sutra_store::{Deliveries, Delivery, DeliveryId, NewDelivery, Result};

use crate::rows::DeliveryRow;
use crate::statements::{Backend, DeliveryStatements, Scope, Statements};
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
}
