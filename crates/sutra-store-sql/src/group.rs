//! Group commit (decision 0024): [`sutra_store::Group`] over a backend's transaction. Each
//! member's statements are the scripts' own (`lock_claim`, `write_step`, the task scripts),
//! each acting for the member's tenant ([`Statements::begin_member`]). A member's claim is the
//! row lock, so a refusal, and every error the scripts return before their first write, leave
//! the transaction as it was, for the members after it.

use jiff::SignedDuration;
use serde_json::Value;
use sutra_store::{
    Claimed, Clock, Committed, CompletingClaim, Group, Groups, HeldTask, Owner, Result, StepCommit,
};

use crate::claim::{NewClaim, lock_claim, lock_claim_completing};
use crate::commit::{StepStatements, write_step};
use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;
use crate::tasks::{complete_locked, deliver_output};

#[async_trait::async_trait]
impl<B: Backend> Groups for SqlStore<B> {
    async fn group(&self, tenant: &str) -> Result<Box<dyn Group>> {
        // Begun acting for the first member's tenant, which then declares nothing: a group of
        // one tenant costs no round trip besides its members' statements.
        let tx = self.begin(Scope::Tenant(tenant)).await?;
        Ok(Box::new(SqlGroup::<B> {
            tx,
            clock: self.backend().clock(),
            ended: Vec::new(),
            completed: None,
        }))
    }
}

struct SqlGroup<B: Backend> {
    tx: B::Tx,
    /// The backend's clock, read as each member commits ([`write_step`]'s `now`).
    clock: Clock,
    /// The instances whose end the members announce, told all at once just before the commit:
    /// one notice per group, however many members end instances held elsewhere.
    ended: Vec<String>,
    /// The task the open member completed under its claim ([`Group::claim_completing`]): its
    /// step has no task of that park left to cancel.
    completed: Option<HeldTask>,
}

#[async_trait::async_trait]
impl<B: Backend> Group for SqlGroup<B> {
    async fn member(&mut self, tenant: &str) -> Result<()> {
        self.completed = None;
        self.tx.begin_member(tenant).await
    }

    async fn claim(
        &mut self,
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
        lock_claim(&mut self.tx, &claim).await
    }

    async fn claim_completing(
        &mut self,
        claim: &CompletingClaim<'_>,
        task: &str,
        lock_token: &str,
    ) -> Result<(Claimed, HeldTask)> {
        let new = NewClaim {
            tenant: claim.tenant,
            instance: claim.instance,
            owner: claim.owner,
            timeout: claim.claim_timeout,
        };
        let (claimed, held) = lock_claim_completing(&mut self.tx, &new, task, lock_token).await?;
        self.completed = Some(held.clone());
        Ok((claimed, held))
    }

    async fn commit_step(&mut self, step: &StepCommit) -> Result<Committed> {
        let instance = &step.snapshot.instance.id;
        let resolved = self
            .completed
            .as_ref()
            .filter(|task| &task.instance == instance)
            .map(|task| task.park);
        let committed = write_step(&mut self.tx, step, resolved, self.clock.now()).await?;
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
        complete_locked(&mut self.tx, tenant, id, lock_token).await
    }

    async fn deliver_output(
        &mut self,
        tenant: &str,
        task: &HeldTask,
        output: &Value,
    ) -> Result<()> {
        deliver_output(&mut self.tx, tenant, task, output).await
    }

    async fn commit(self: Box<Self>) -> Result<()> {
        let SqlGroup { mut tx, ended, .. } = *self;
        if !ended.is_empty() {
            tx.announce_ended(&ended).await?;
        }
        tx.commit().await
    }
}
