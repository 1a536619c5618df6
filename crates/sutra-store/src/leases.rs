//! Leases (SPEC §6): which replica leads each singleton role, on a store replicas share.

use jiff::{SignedDuration, Timestamp};

use crate::Result;

/// A lease row (SPEC §6): who leads `role` until `expires_at`, by the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub role: String,
    pub holder: String,
    pub expires_at: Timestamp,
    /// Grows by one whenever the holder changes, never otherwise: a holder's work can be fenced
    /// with it, since a later holder always has a larger epoch.
    pub epoch: i64,
}

/// Leader election for the singleton roles.
#[async_trait::async_trait]
pub trait Leases: Send + Sync {
    /// Whether this store is the one database of a fleet of replicas, whose singleton roles must
    /// then be led by one replica at a time, elected with [`Leases::acquire_lease`]. The embedded
    /// store belongs to one `sutra serve`: each process on it leads every role (SPEC §6).
    fn shared_by_replicas(&self) -> bool;

    /// Takes `role` for `holder` until `ttl` from now by the store's clock, if the lease is free,
    /// expired, or already `holder`'s (a renewal); the epoch grows by one when the holder
    /// changes. `None`: another holder's lease is live, and nothing was written.
    async fn acquire_lease(
        &self,
        role: &str,
        holder: &str,
        ttl: SignedDuration,
    ) -> Result<Option<Lease>>;

    /// Lets `holder`'s lease on `role` expire now, so that another holder takes it at once; the
    /// row and its epoch stay. A no-op unless `holder` holds it.
    async fn release_lease(&self, role: &str, holder: &str) -> Result<()>;

    /// Every lease row, live or expired, by role.
    async fn leases(&self) -> Result<Vec<Lease>>;
}
