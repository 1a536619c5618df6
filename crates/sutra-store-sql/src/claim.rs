//! The claim (SPEC §5.2): claim, release and sweep, each one conditional statement compared
//! against the store's clock.

use std::future::Future;

use jiff::{SignedDuration, Timestamp};
use sutra_core::snapshot::{Failure, Status};
use sutra_store::codec::corrupt;
use sutra_store::{
    ClaimAhead, ClaimKind, ClaimToken, Claimed, Claims, Error, HeldTask, Owner, Result,
    SweepOutcome,
};

use crate::rows::{AheadRow, ClaimedRow, CompletedRow, SnapshotTextRow, SweptRow};
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;
use crate::tasks::{TaskStatements, completed_or_why};

#[async_trait::async_trait]
impl<B: Backend> Claims for SqlStore<B> {
    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed> {
        let claim = NewClaim {
            tenant,
            instance,
            owner,
            timeout: claim_timeout,
        };
        // A refusal (a snapshot that does not decode) rolls the claim's write back before it is
        // answered, and with it the row lock a group's claim right after would find held.
        self.once(Scope::Tenant(tenant), async |tx| {
            take_claim(tx, &claim).await
        })
        .await
    }

    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        self.once(Scope::Tenant(tenant), async |tx| {
            tx.release(tenant, instance, token).await
        })
        .await
    }

    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome> {
        let swept = self
            .once(Scope::System, async |tx| tx.sweep(claim_timeout).await)
            .await?;
        Ok(SweptRow::outcome(swept, max_recoveries))
    }

    async fn mark_unreadable(
        &self,
        tenant: &str,
        instance: &str,
        failure: &Failure,
    ) -> Result<bool> {
        let failure = serde_json::to_string(failure).map_err(|e| corrupt("a failure", e))?;
        let now = self.backend().clock().now();
        self.once(Scope::Tenant(tenant), async |tx| {
            let row = tx.lock_snapshot(tenant, instance).await?;
            let unreadable = row.is_some_and(|row| !row.marked() && row.decode().is_err());
            if unreadable {
                let mark = Mark {
                    status: Status::Failed,
                    unreadable: Some(&failure),
                    now,
                };
                tx.set_mark(tenant, instance, &mark).await?;
            }
            Ok(unreadable)
        })
        .await
    }

    /// Ended on every path by [`SqlStore::once`]: a dropped transaction's row lock would refuse
    /// the claim of the restore that follows (a bulk restore saw half its instances "claim held").
    async fn clear_unreadable(&self, tenant: &str, instance: &str) -> Result<Option<Status>> {
        let now = self.backend().clock().now();
        self.once(Scope::Tenant(tenant), async |tx| {
            let Some(row) = tx.lock_snapshot(tenant, instance).await? else {
                return Err(Error::InstanceNotFound(instance.to_owned()));
            };
            if !row.marked() {
                return Ok(None);
            }
            let snapshot = row.decode()?;
            let mark = Mark {
                status: snapshot.status,
                unreadable: None,
                now,
            };
            tx.set_mark(tenant, instance, &mark).await?;
            Ok(Some(snapshot.status))
        })
        .await
    }
}

/// What [`ClaimStatements::set_mark`] writes on an instance's row.
pub struct Mark<'a> {
    pub status: Status,
    /// The failure as JSON text; `None` clears the mark.
    pub unreadable: Option<&'a str>,
    pub now: Timestamp,
}

/// Takes the durable claim in the caller's transaction. A refusal has written nothing.
async fn take_claim<T: ClaimStatements>(tx: &mut T, claim: &NewClaim<'_>) -> Result<Claimed> {
    let row = tx.claim(claim).await?;
    decode_or_refuse(tx, claim, row, ClaimKind::Durable).await
}

/// Takes the claim as the row lock of the caller's transaction (a group's): nothing is written,
/// and a refusal leaves the transaction as it was.
pub(crate) async fn lock_claim<T: ClaimStatements>(
    tx: &mut T,
    claim: &NewClaim<'_>,
) -> Result<Claimed> {
    let row = tx.lock_claimable(claim).await?;
    decode_or_refuse(tx, claim, row, ClaimKind::Locked).await
}

/// [`lock_claim`], then the completion of `task` under it (`sutra_store::Group::claim_completing`).
pub(crate) async fn lock_claim_completing<T: ClaimStatements + TaskStatements>(
    tx: &mut T,
    claim: &NewClaim<'_>,
    task: &str,
    lock_token: &str,
) -> Result<(Claimed, HeldTask)> {
    let (row, completed) = tx
        .lock_claimable_completing(claim, task, lock_token)
        .await?;
    let claimed = decode_or_refuse(tx, claim, row, ClaimKind::Locked).await?;
    let held = completed_or_why(tx, claim.tenant, task, lock_token, completed).await?;
    Ok((claimed, held))
}

/// A claim taken ahead, decoded as [`decode_or_refuse`] decodes one taken when asked.
pub(crate) fn decode_ahead(
    owner: &Owner,
    claimed: Option<ClaimedRow>,
    ahead: &AheadRow,
) -> Result<Claimed> {
    match claimed {
        Some(row) => row.decode(owner, ClaimKind::Locked),
        None if ahead.present => Err(Error::ClaimHeld),
        None => Err(Error::InstanceNotFound(ahead.instance.clone())),
    }
}

/// The claimed row, or why there is none: held, or no such instance.
async fn decode_or_refuse<T: ClaimStatements>(
    tx: &mut T,
    claim: &NewClaim<'_>,
    row: Option<ClaimedRow>,
    kind: ClaimKind,
) -> Result<Claimed> {
    match row {
        Some(row) => row.decode(claim.owner, kind),
        None if tx.instance_exists(claim.tenant, claim.instance).await? => Err(Error::ClaimHeld),
        None => Err(Error::InstanceNotFound(claim.instance.to_owned())),
    }
}

/// A claim to take: `owner`'s, on the instance, unless another owner's claim younger than
/// `timeout` holds it.
pub struct NewClaim<'a> {
    pub tenant: &'a str,
    pub instance: &'a str,
    pub owner: &'a Owner,
    pub timeout: SignedDuration,
}

/// The statements of the claim (`claim`).
pub trait ClaimStatements: Statements {
    /// Takes the instance's claim for its owner if it is free, already the owner's, or older than
    /// the timeout by the store's clock, and grows the fence; `None`, having written
    /// nothing, otherwise.
    fn claim(
        &mut self,
        claim: &NewClaim<'_>,
    ) -> impl Future<Output = Result<Option<ClaimedRow>>> + Send;

    /// Locks the instance's row for this transaction if the claim predicate holds and no other
    /// transaction holds the row (skipping it, never waiting); its fence, snapshot and holder,
    /// or `None`, having written nothing. The claim of a group member ([`ClaimKind::Locked`]).
    ///
    /// [`ClaimKind::Locked`]: sutra_store::ClaimKind::Locked
    fn lock_claimable(
        &mut self,
        claim: &NewClaim<'_>,
    ) -> impl Future<Output = Result<Option<ClaimedRow>>> + Send;

    /// [`ClaimStatements::lock_claimable`], then, if the row is claimed,
    /// [`TaskStatements::complete_locked`] of the task: what each returned. By default the two
    /// statements; a backend may make them one.
    fn lock_claimable_completing(
        &mut self,
        claim: &NewClaim<'_>,
        task: &str,
        lock_token: &str,
    ) -> impl Future<Output = Result<(Option<ClaimedRow>, Option<CompletedRow>)>> + Send
    where
        Self: TaskStatements,
    {
        async move {
            let Some(claimed) = self.lock_claimable(claim).await? else {
                return Ok((None, None));
            };
            let completed = self.complete_locked(claim.tenant, task, lock_token).await?;
            Ok((Some(claimed), completed))
        }
    }

    /// The claims of `ahead`'s instances for `owner`, each taken as
    /// [`ClaimStatements::lock_claimable_completing`] (a completion's) or
    /// [`ClaimStatements::lock_claimable`] takes it, in one statement: a row per instance taken
    /// ahead. By default none is: each member then claims when it asks
    /// ([`sutra_store::Group::claim_ahead`]).
    fn lock_claimables(
        &mut self,
        _tenant: &str,
        _owner: &Owner,
        _timeout: SignedDuration,
        _ahead: &[ClaimAhead<'_>],
    ) -> impl Future<Output = Result<Vec<AheadRow>>> + Send {
        async { Ok(Vec::new()) }
    }

    fn instance_exists(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> impl Future<Output = Result<bool>> + Send;

    /// Clears the claim if `token` still holds it.
    fn release(
        &mut self,
        tenant: &str,
        instance: &str,
        token: &ClaimToken,
    ) -> impl Future<Output = Result<()>> + Send;

    /// Clears every claim older than `claim_timeout`, counting a recovery on each; returns them.
    fn sweep(
        &mut self,
        claim_timeout: SignedDuration,
    ) -> impl Future<Output = Result<Vec<SweptRow>>> + Send;

    /// The instance's snapshot as text and its mark, the row locked until the transaction ends
    /// (waiting for a step in flight on it); `None` when there is no such instance.
    fn lock_snapshot(
        &mut self,
        tenant: &str,
        instance: &str,
    ) -> impl Future<Output = Result<Option<SnapshotTextRow>>> + Send;

    /// Writes `mark` on the instance's row: its `status`, `unreadable` and `updated_at`.
    fn set_mark(
        &mut self,
        tenant: &str,
        instance: &str,
        mark: &Mark<'_>,
    ) -> impl Future<Output = Result<()>> + Send;
}
