//! Group commit (decision 0024): many lane steps share one transaction, each on its own claim.
//!
//! A lane step is one transaction whose first statement for the step takes the claim, refusing
//! at once when another transaction holds the instance's row or a live claim is on it; the
//! executor runs on the claimed snapshot in memory, and the step's writes follow in the same
//! transaction ([`Group::commit_step`], the same script as [`crate::Steps::commit`]). A group is
//! such a transaction carrying several steps — its *members* — one after the other:
//!
//! - each member is claimed, guarded by its fence and written on its own predicate; its claim is
//!   the row lock ([`crate::ClaimKind::Locked`]), so a member refused, stale or rejected before
//!   its writes leaves nothing, and the others stay. A member that fails *after* writing
//!   something (a database error) fails the group: the caller runs each member again alone;
//! - a group may take its members' claims ahead ([`Group::claim_ahead`]) and keep their plain
//!   steps to write them together ([`Group::defer_plain_steps`]): each member is still answered
//!   as if it claimed and wrote on its own, and a kept step that does not land fails the group;
//! - nothing of any member is durable until [`Group::commit`] returns, so a caller is answered
//!   only after it: *reply implies committed* holds for every member;
//! - a process that dies before the commit leaves nothing: its transaction rolls back, and the
//!   claims it took inside it were never visible to anyone else.

use jiff::SignedDuration;
use serde_json::Value;
use sutra_core::snapshot::ParkId;

use crate::{Claimed, Committed, Owner, Result, StepCommit};

/// A task a worker's lock token held, completed in a group: whose park it was. Its row stays
/// locked until the group ends.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldTask {
    pub instance: String,
    pub park: ParkId,
}

/// The claim a completion takes ([`Group::claim_completing`]).
#[derive(Debug, Clone, Copy)]
pub struct CompletingClaim<'a> {
    pub tenant: &'a str,
    pub instance: &'a str,
    pub owner: &'a Owner,
    pub claim_timeout: SignedDuration,
}

/// A claim a member of a group will ask for, taken ahead with the other members'
/// ([`Group::claim_ahead`]): the member's instance, and for a completion the task it completes
/// under the claim and its lock token.
#[derive(Debug, Clone, Copy)]
pub struct ClaimAhead<'a> {
    pub instance: &'a str,
    pub completing: Option<(&'a str, &'a str)>,
}

/// Beginning group transactions.
#[async_trait::async_trait]
pub trait Groups: Send + Sync {
    /// Begins a transaction that one or more steps will share, acting for `tenant` (its first
    /// member's) until a member declares another.
    async fn group(&self, tenant: &str) -> Result<Box<dyn Group>>;
}

/// A transaction carrying steps, one member at a time. Dropping it without [`Group::commit`]
/// rolls every member back, but only once its connection is back with the store: a group that
/// fails ends with [`Group::rollback`] before its members are tried again.
#[async_trait::async_trait]
pub trait Group: Send {
    /// Opens the next member, acting for `tenant`.
    async fn member(&mut self, tenant: &str) -> Result<()>;

    /// [`crate::Claims::claim`] inside the group's transaction: the instance's row stays locked
    /// until the group ends, so the claim and the step's commit are one transaction. Refuses with
    /// [`crate::Error::ClaimHeld`] at once, never waiting, when another transaction holds the row.
    async fn claim(
        &mut self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed>;

    /// [`Group::claim`], then [`Group::complete_task`] under the claim, as one statement where
    /// the store can: a worker's completion that resumes its instance in place. A refused claim
    /// ([`crate::Error::ClaimHeld`], [`crate::Error::InstanceNotFound`]) leaves the task as it
    /// was; a claim taken under which the task's lock does not hold refuses as `complete_task`
    /// does. Either refusal writes nothing.
    async fn claim_completing(
        &mut self,
        claim: &CompletingClaim<'_>,
        task: &str,
        lock_token: &str,
    ) -> Result<(Claimed, HeldTask)>;

    /// Takes ahead, in one statement where the store can, the claims that members acting for
    /// `tenant` will ask for next with [`Group::claim`] or [`Group::claim_completing`], for
    /// `owner`: each is then answered from what this took, as its own statement would have
    /// answered it (the row locked, or refused as held or absent; a completion's task completed
    /// under the claim, or not), with no statement of its own. An instance appears at most once:
    /// a second member on one instance must read what the first wrote. A claim not taken ahead
    /// is taken when asked, as before; a store that cannot batch takes nothing ahead.
    async fn claim_ahead(
        &mut self,
        _tenant: &str,
        _owner: &Owner,
        _claim_timeout: SignedDuration,
        _ahead: &[ClaimAhead<'_>],
    ) -> Result<()> {
        Ok(())
    }

    /// Lets the store keep plain steps — settles and starts that write only their own rows —
    /// handed to [`Group::commit_step`] and write them together before a statement that might
    /// read them or the group's commit, in one statement per kind where it can (decision 0059).
    /// Each kept step is answered as if written; a kept step found not to land when it is
    /// written (a settle whose fence moved, a start whose message was consumed or is awaited)
    /// writes nothing and fails the whole group, at the latest at [`Group::commit`]: the caller
    /// then runs each member alone, in a group that does not defer. Without it, each step is
    /// written when it is handed over.
    fn defer_plain_steps(&mut self) {}

    /// [`crate::Steps::commit`]'s writes, in the group's transaction. A refusal found before
    /// the first write ([`crate::Error::Duplicate`], [`crate::Error::AliasTaken`]) leaves the
    /// transaction as it was; any other error may leave the member half written, and the group
    /// must not commit.
    async fn commit_step(&mut self, step: &StepCommit) -> Result<Committed>;

    /// The first half of [`crate::Tasks::complete_task`] in the group's transaction: the task
    /// is completed if `lock_token` holds it now, in one statement. A refusal
    /// ([`crate::Error::LockLost`], [`crate::Error::TaskNotFound`]) writes nothing.
    async fn complete_task(&mut self, tenant: &str, id: &str, lock_token: &str)
    -> Result<HeldTask>;

    /// The second half, unless a step of the same member resumes the instance with the output
    /// in place: the output is recorded as a `TaskCompleted` delivery to the completed task's
    /// park, due now, for the dispatcher.
    async fn deliver_output(&mut self, tenant: &str, task: &HeldTask, output: &Value)
    -> Result<()>;

    /// Commits every member kept, and announces in the same transaction, once for all of them,
    /// the ends its members asked to announce ([`crate::StepCommit::announce_end`]).
    async fn commit(self: Box<Self>) -> Result<()>;

    /// Rolls every member back and releases the rows the group holds before it returns. A
    /// dropped group rolls back later, when its connection is next used: a claim of one of its
    /// instances made meanwhile — its members run alone — is refused as held.
    async fn rollback(self: Box<Self>) -> Result<()>;
}
