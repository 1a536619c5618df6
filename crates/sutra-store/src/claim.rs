//! The claim (SPEC §5.2): who may run an instance's next step. A claim is a compare-and-set on the
//! instance row that refuses ([`crate::Error::ClaimHeld`]) instead of waiting, increments the fence
//! on every claim, and is re-entrant for the same owner; the sweep clears claims by age alone and
//! never parses owner ids. The commit that releases a claim is the step's ([`crate::Steps`]).

use jiff::SignedDuration;
use sutra_core::snapshot::{Failure, Snapshot, Status};

use crate::Result;

/// Who holds a claim. Opaque to the store: compared for equality, never parsed.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Owner(pub String);

/// Proof of a claim, required to commit or release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToken {
    pub owner: Owner,
    /// The fence the claim read: a durable claim grew it; a locked one's commit grows it.
    pub fence: i64,
    pub kind: ClaimKind,
}

/// How a claim is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimKind {
    /// Written on the row ([`Claims::claim`]): it outlives its transaction until a commit or
    /// release clears it, or the sweep does by age.
    Durable,
    /// The row lock of the transaction it was taken in ([`crate::Group::claim`]): nothing is
    /// written until the step's commit, which grows the fence, and nothing outlives the
    /// transaction.
    Locked,
}

/// What a successful claim returns: the fence and everything needed to rehydrate the instance.
#[derive(Debug, Clone, PartialEq)]
pub struct Claimed {
    pub token: ClaimToken,
    pub snapshot: Snapshot,
    /// Who holds a caller until the instance ends, as last recorded ([`crate::StepCommit::held_by`]).
    pub held_by: Option<String>,
}

/// What a sweep did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SweepOutcome {
    /// Claims cleared because they were older than the claim timeout.
    pub cleared: u64,
    /// Instances cleared `max_recoveries` sweeps in a row: their steps keep dying. The engine
    /// fails them with `SUTRA.RUNTIME.STEP.POISONED`.
    pub poisoned: Vec<InstanceKey>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceKey {
    pub tenant: String,
    pub id: String,
}

/// Taking, giving back and sweeping claims.
#[async_trait::async_trait]
pub trait Claims: Send + Sync {
    /// Takes the instance's claim for `owner` if it is free, already `owner`'s, or older than
    /// `claim_timeout`; increments the fence. Refuses with [`crate::Error::ClaimHeld`] otherwise,
    /// having written nothing.
    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed>;

    /// Gives the claim back without committing. A no-op if the claim was already lost.
    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()>;

    /// Clears every claim older than `claim_timeout`, by age alone, and reports instances
    /// cleared `max_recoveries` times in a row.
    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome>;

    /// Fails the instance in its row, when its snapshot cannot be decoded and so cannot hold the
    /// failure (docs/decisions/0082): `status` becomes `failed` and `failure` is kept in a
    /// column of its own, which listings read and every claim refuses. Checked under the row's
    /// lock: whether it marked the row — not when the snapshot decodes (repaired meanwhile), the
    /// row is marked already, or there is no such instance.
    async fn mark_unreadable(
        &self,
        tenant: &str,
        instance: &str,
        failure: &Failure,
    ) -> Result<bool>;

    /// Clears the mark [`Claims::mark_unreadable`] wrote, once the snapshot decodes again: the
    /// row's `status` is its snapshot's once more, the status returned. `None` when the row is
    /// not marked. [`crate::Error::Corrupt`], having written nothing, while the snapshot still
    /// does not decode.
    async fn clear_unreadable(&self, tenant: &str, instance: &str) -> Result<Option<Status>>;
}
