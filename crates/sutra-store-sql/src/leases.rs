//! Lease rows (SPEC §6): leader election for the singleton roles, by the store's clock. Leases
//! are the fleet's, not a tenant's: every statement runs in the system scope.

use std::future::Future;

use jiff::SignedDuration;
use sutra_store::{Lease, Leases, Result};

use crate::rows::LeaseRow;
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Leases for SqlStore<B> {
    fn shared_by_replicas(&self) -> bool {
        self.backend().shared_by_replicas()
    }

    async fn acquire_lease(
        &self,
        role: &str,
        holder: &str,
        ttl: SignedDuration,
    ) -> Result<Option<Lease>> {
        let row = self
            .once(Scope::System, async |tx| {
                tx.acquire_lease(&NewLease { role, holder, ttl }).await
            })
            .await?;
        row.map(LeaseRow::decode).transpose()
    }

    async fn release_lease(&self, role: &str, holder: &str) -> Result<()> {
        self.once(Scope::System, async |tx| {
            tx.release_lease(role, holder).await
        })
        .await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        let rows = self
            .once(Scope::System, async |tx| tx.leases().await)
            .await?;
        rows.into_iter().map(LeaseRow::decode).collect()
    }
}

/// A lease to take: `role` for `holder`, until `ttl` from now.
pub struct NewLease<'a> {
    pub role: &'a str,
    pub holder: &'a str,
    pub ttl: SignedDuration,
}

/// The statements of the lease rows (`leases`).
pub trait LeaseStatements: Statements {
    /// Inserts or takes over the role's row for the holder, unless another holder's lease is
    /// live; the row, or `None` having written nothing.
    fn acquire_lease(
        &mut self,
        lease: &NewLease<'_>,
    ) -> impl Future<Output = Result<Option<LeaseRow>>> + Send;

    /// Ends `holder`'s lease on `role` now, unless it ended already.
    fn release_lease(
        &mut self,
        role: &str,
        holder: &str,
    ) -> impl Future<Output = Result<()>> + Send;

    fn leases(&mut self) -> impl Future<Output = Result<Vec<LeaseRow>>> + Send;
}
