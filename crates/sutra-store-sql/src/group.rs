//! Group commit (decision 0024): [`sutra_store::Group`] over a backend's transaction. Each
//! member's statements are the scripts' own (`lock_claim`, `write_step`, the task scripts),
//! each acting for the member's tenant ([`Statements::begin_member`]). A member's claim is the
//! row lock, so a refusal, and every error the scripts return before their first write, leave
//! the transaction as it was, for the members after it. A group told to defer
//! ([`Group::defer_plain_steps`]) keeps its plain steps for one write per kind (`deferred`), done
//! before any statement that might read them.

use std::collections::HashMap;

use jiff::SignedDuration;
use serde_json::Value;
use sutra_store::{
    ClaimAhead, Claimed, Clock, Committed, CompletingClaim, Error, Group, Groups, HeldTask, Owner,
    Result, StepCommit,
};

use crate::claim::{ClaimStatements, NewClaim, decode_ahead, lock_claim, lock_claim_completing};
use crate::commit::{StepStatements, write_step};
use crate::deferred::{
    Deferred, defer, deferrable, must_write_kept_first, reads_waits, write_deferred,
};
use crate::rows::AheadRow;
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;
use crate::tasks::{complete_locked, completed_or_why, deliver_output};

#[async_trait::async_trait]
impl<B: Backend> Groups for SqlStore<B> {
    async fn group(&self, tenant: &str) -> Result<Box<dyn Group>> {
        // Begun acting for the first member's tenant, which then declares nothing: a group of
        // one tenant costs no round trip besides its members' statements.
        let tx = self.begin(Scope::Tenant(tenant)).await?;
        Ok(Box::new(SqlGroup::<B> {
            tx,
            clock: self.backend().clock(),
            acting_for: tenant.to_owned(),
            ended: Vec::new(),
            completed: None,
            ahead: HashMap::new(),
            defers: false,
            deferred: Vec::new(),
        }))
    }
}

struct SqlGroup<B: Backend> {
    tx: B::Tx,
    /// The backend's clock, read as each member commits ([`write_step`]'s `now`).
    clock: Clock,
    /// The tenant the transaction acts for now: the steps kept are all this tenant's.
    acting_for: String,
    /// The instances whose end the members announce, told all at once just before the commit:
    /// one notice per group, however many members end instances held elsewhere.
    ended: Vec<String>,
    /// The task the open member completed under its claim ([`Group::claim_completing`]): its
    /// step has no task of that park left to cancel.
    completed: Option<HeldTask>,
    /// The claims taken ahead ([`Group::claim_ahead`]) and not asked for yet, by instance, with
    /// the task and lock token a completion's was taken with.
    ahead: HashMap<String, (AheadRow, Option<(String, String)>)>,
    /// Whether plain steps are kept for one write per kind ([`Group::defer_plain_steps`]).
    defers: bool,
    /// The plain steps kept, written before a statement that might read them.
    deferred: Vec<Deferred>,
}

impl<B: Backend> SqlGroup<B> {
    /// The claim taken ahead for `instance`, if one was, asked for as it was taken: a member
    /// asking otherwise than the engine announced is a bug, refused before anything more is
    /// written.
    fn taken_ahead(
        &mut self,
        instance: &str,
        completing: Option<(&str, &str)>,
    ) -> Result<Option<AheadRow>> {
        let Some((row, taken_with)) = self.ahead.remove(instance) else {
            return Ok(None);
        };
        let asked = completing.map(|(task, token)| (task.to_owned(), token.to_owned()));
        if asked != taken_with {
            return Err(Error::Corrupt(format!(
                "the claim of {instance} was taken ahead for another request than the one asking"
            )));
        }
        Ok(Some(row))
    }

    /// Writes the steps kept before a statement that might read what they write: one on an
    /// instance a kept step is of, or (`reads_waits`) a step that looks at the waits a kept
    /// settle's cleared receive removes — its own alias's holder, or whether its start message
    /// is awaited. Nothing else a step or a task's statement reads is a row a plain step
    /// writes: its instance row, history, tasks and deliveries are its own instance's, a start's
    /// inbox row is its message's (a second start of the same message finds it when kept ones
    /// are written, and fails the group), and a step that cancels a child or reports to a
    /// parent is not plain.
    async fn write_kept_before(&mut self, instance: &str, reads_waits: bool) -> Result<()> {
        let read = self
            .deferred
            .iter()
            .any(|kept| kept.instance() == instance || (reads_waits && kept.clears_a_receive()));
        if read {
            self.write_kept().await?;
        }
        Ok(())
    }

    /// Writes the steps kept.
    async fn write_kept(&mut self) -> Result<()> {
        if self.deferred.is_empty() {
            return Ok(());
        }
        let kept = std::mem::take(&mut self.deferred);
        write_deferred(&mut self.tx, &kept).await
    }
}

#[async_trait::async_trait]
impl<B: Backend> Group for SqlGroup<B> {
    async fn member(&mut self, tenant: &str) -> Result<()> {
        self.completed = None;
        if tenant != self.acting_for {
            self.write_kept().await?;
            tenant.clone_into(&mut self.acting_for);
        }
        self.tx.begin_member(tenant).await
    }

    fn defer_plain_steps(&mut self) {
        self.defers = true;
    }

    async fn claim(
        &mut self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed> {
        if let Some(mut ahead) = self.taken_ahead(instance, None)? {
            let claimed = ahead.claimed();
            return decode_ahead(owner, claimed, &ahead);
        }
        let claim = NewClaim {
            tenant,
            instance,
            owner,
            timeout: claim_timeout,
        };
        self.write_kept_before(instance, false).await?;
        lock_claim(&mut self.tx, &claim).await
    }

    async fn claim_completing(
        &mut self,
        claim: &CompletingClaim<'_>,
        task: &str,
        lock_token: &str,
    ) -> Result<(Claimed, HeldTask)> {
        let (claimed, held) = match self.taken_ahead(claim.instance, Some((task, lock_token)))? {
            Some(mut ahead) => {
                let claimed = decode_ahead(claim.owner, ahead.claimed(), &ahead)?;
                let completed = ahead.completed();
                if completed.is_none() {
                    self.write_kept_before(claim.instance, false).await?;
                }
                let held =
                    completed_or_why(&mut self.tx, claim.tenant, task, lock_token, completed)
                        .await?;
                (claimed, held)
            }
            None => {
                let new = NewClaim {
                    tenant: claim.tenant,
                    instance: claim.instance,
                    owner: claim.owner,
                    timeout: claim.claim_timeout,
                };
                self.write_kept_before(claim.instance, false).await?;
                lock_claim_completing(&mut self.tx, &new, task, lock_token).await?
            }
        };
        self.completed = Some(held.clone());
        Ok((claimed, held))
    }

    async fn claim_ahead(
        &mut self,
        tenant: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
        ahead: &[ClaimAhead<'_>],
    ) -> Result<()> {
        self.write_kept().await?;
        let rows = self
            .tx
            .lock_claimables(tenant, owner, claim_timeout, ahead)
            .await?;
        for row in rows {
            let taken_with = ahead
                .iter()
                .find(|claim| claim.instance == row.instance)
                .and_then(|claim| claim.completing)
                .map(|(task, token)| (task.to_owned(), token.to_owned()));
            self.ahead.insert(row.instance.clone(), (row, taken_with));
        }
        Ok(())
    }

    async fn commit_step(&mut self, step: &StepCommit) -> Result<Committed> {
        let instance = &step.snapshot.instance.id;
        let resolved = self
            .completed
            .as_ref()
            .filter(|task| &task.instance == instance)
            .map(|task| task.park);
        let kept_already = self.deferred.iter().any(|kept| kept.instance() == instance);
        let committed = if self.defers && !kept_already && deferrable(step, resolved) {
            if must_write_kept_first(&self.deferred, step) {
                self.write_kept().await?;
            }
            let (kept, committed) = defer(step, self.clock.now());
            self.deferred.push(kept);
            committed
        } else {
            self.write_kept_before(instance, reads_waits(step)).await?;
            write_step(&mut self.tx, step, resolved, self.clock.now()).await?
        };
        if step.announce_end {
            self.ended.push(step.snapshot.instance.id.clone());
        }
        Ok(committed)
    }

    async fn complete_task(
        &mut self,
        tenant: &str,
        id: &str,
        lock_token: &str,
    ) -> Result<HeldTask> {
        let instance = sutra_store::task_instance(id).unwrap_or_default();
        self.write_kept_before(instance, false).await?;
        complete_locked(&mut self.tx, tenant, id, lock_token).await
    }

    async fn deliver_output(
        &mut self,
        tenant: &str,
        task: &HeldTask,
        output: &Value,
    ) -> Result<()> {
        self.write_kept_before(&task.instance, false).await?;
        deliver_output(&mut self.tx, tenant, task, output).await
    }

    async fn commit(mut self: Box<Self>) -> Result<()> {
        self.write_kept().await?;
        let SqlGroup { mut tx, ended, .. } = *self;
        if !ended.is_empty() {
            tx.announce_ended(&ended).await?;
        }
        tx.commit().await
    }

    async fn rollback(self: Box<Self>) -> Result<()> {
        self.tx.rollback().await
    }
}
