//! The claim-guarded step (SPEC §5.2, decision 0024): claim → load → apply one event → write
//! every row of the step, all inside one member of a group transaction ([`sutra_store::Group`]).
//!
//! The claim is the member's first statement and refuses at once; the executor runs on the
//! claimed snapshot in memory; the step's writes follow, guarded by the claim's fence and
//! growing it. Nothing here commits: `group` commits the group and only then lands each member
//! ([`Written::land`]) — answers its caller, wakes whoever acts next. The claim is the
//! row lock of the group's transaction and writes nothing, so a member refused or rejected
//! leaves nothing to release or undo ([`fails_clean`]), and a process that dies mid-step leaves
//! nothing at all.

use std::collections::BTreeMap;

use sutra_core::codes::Code;
use sutra_core::exec;
use sutra_core::snapshot::{InstanceInfo, Snapshot};
use sutra_core::step::{Disarm, Effect, Event, Message, Rejection, Step, StepContext};
use sutra_store::{Claimed, CompletingClaim, DeliveryId, Group, InstanceKey, Owner};
use tracing::debug;

use crate::error::Error;
use crate::handoff::{Take, arms_a_task, takers};
use crate::registry::Live;
pub use crate::request::StepOutcome;
use crate::request::{Completion, Consumed, StepRequest, Work};
use crate::shared::Shared;
use crate::step_rows::{PendingCommit, fail_on_taken_alias, to_commit};
use crate::written::Written;
use crate::{fault, history_log, metrics};

/// Who runs a member's step: the replica's shared parts, the claim's owner, the deployments
/// the lane sees.
pub(crate) struct Stepper<'a> {
    pub shared: &'a Shared,
    pub owner: &'a Owner,
    pub live: &'a Live,
}

impl Stepper<'_> {
    /// What a step of `tenant`'s instance is given besides its flow, snapshot and event: the
    /// time, the limits the configuration sets, and the instances the tenant may still start.
    fn ctx(&self, tenant: &str) -> StepContext {
        let config = &self.shared.config;
        StepContext {
            instances_room: self.shared.live.room(tenant),
            items_max: config.for_each_max_items,
            call_depth_max: config.call_max_depth,
            call_children_max: config.call_max_children,
            expression_cost_max: config.expression_max_cost,
            expression_value_bytes_max: config.expression_max_value_bytes,
            vars_bytes_max: config.instance_max_vars_bytes,
            // 122 random bits, of which a child id takes 74 (`exec/call.rs` `child_id`).
            id_seed: uuid::Uuid::new_v4().as_u128(),
            ..StepContext::at(self.shared.clock.now())
        }
    }

    /// Runs `request` as the group's open member.
    pub(crate) async fn step(
        &self,
        group: &mut dyn Group,
        request: &StepRequest,
    ) -> Result<Written, Error> {
        let started = self.shared.clock.instant();
        let StepRequest { key, work, hold } = request;
        let result = match work {
            Work::Start {
                info,
                message,
                channel,
                key,
            } => {
                let consumed = Consumed {
                    channel: channel.clone(),
                    event_id: message.id.clone(),
                    key: key.clone(),
                };
                self.start(group, info, message, consumed, *hold).await
            }
            Work::Resume {
                event,
                taken,
                consumed,
            } => {
                let resumption = Resumption {
                    kind: history_log::RESUME,
                    event: event.clone(),
                    taken: *taken,
                    consumed: consumed.clone(),
                    hold: *hold,
                    take: None,
                };
                self.resume(group, key, resumption).await
            }
            Work::Migrate { to_version, map } => self.migrate(group, key, *to_version, map).await,
            Work::Poison { code, detail } => self.poison(group, key, *code, detail).await,
        };
        // A resumed step that failed after its claim was counted by `resume`, under its flow. A
        // start refused because an instance waits for its message was no step: intake relays it.
        if let (Err(error), Work::Start { info, .. }) = (&result, work)
            && !matches!(error, Error::Store(sutra_store::Error::Waited { .. }))
        {
            self.shared.step_ended(
                info,
                outcome_label(error),
                self.shared.clock.elapsed(started),
            );
        }
        result.map(|written| written.since(started))
    }

    /// A worker's completion: the task's lock is checked, and when the instance's claim is free
    /// the task is completed and the instance resumed with its output in the same member, with
    /// no delivery written at all. When the claim refuses (or the resumed step is rejected before
    /// it writes), the completion is recorded as a durable delivery, due now, which the
    /// dispatcher takes with look-again (SPEC §5.6): `None`.
    pub(crate) async fn complete(
        &self,
        group: &mut dyn Group,
        completion: &Completion,
    ) -> Result<Option<Written>, Error> {
        let started = self.shared.clock.instant();
        let Completion {
            tenant,
            task,
            lock_token,
            output,
            take,
            in_place,
        } = completion;
        let instance =
            sutra_store::task_instance(task).ok_or_else(|| Error::TaskNotFound(task.clone()))?;
        if !in_place {
            self.deliver_completion(group, completion).await?;
            return Ok(None);
        }
        // The claim first, and the task completed under it: a refused claim writes nothing, so
        // the completion after it is still clean.
        let claim = CompletingClaim {
            tenant,
            instance,
            owner: self.owner,
            claim_timeout: self.shared.config.claim_timeout,
        };
        let completing = group.claim_completing(&claim, task, lock_token).await;
        let (claimed, held) = match completing.map_err(claim_error) {
            Ok(both) => both,
            // An unreadable instance's completion is left to the dispatcher too, which defers it
            // until the instance is restored: the worker's call is done.
            Err(error @ (Error::Busy | Error::NotFound(_) | Error::Unreadable(_))) => {
                if matches!(error, Error::Busy) {
                    metrics::claim_bounce(metrics::BouncePath::Timer);
                    self.refused(&error, tenant, instance);
                }
                self.deliver_completion(group, completion).await?;
                return Ok(None);
            }
            Err(error) => return Err(error),
        };
        fault::point("after-claim");
        let resumption = Resumption {
            kind: history_log::COMPLETE,
            event: Event::TaskCompleted {
                park: held.park,
                output: output.clone(),
            },
            taken: None,
            consumed: None,
            hold: false,
            take: take.clone(),
        };
        match self.advance_metered(group, claimed, resumption).await {
            Ok(written) => Ok(Some(written.since(started))),
            // The step wrote nothing: the completion stands alone, as a delivery, due now.
            Err(error) if fails_clean(&error) => {
                debug!(%task, %error, "a completion could not resume in place");
                group.deliver_output(tenant, &held, output).await?;
                Ok(None)
            }
            Err(error) => Err(error),
        }
    }

    /// A completion that cannot resume its instance now: the task is completed and its output
    /// left to the dispatcher as a delivery.
    async fn deliver_completion(
        &self,
        group: &mut dyn Group,
        completion: &Completion,
    ) -> Result<(), Error> {
        let tenant = &completion.tenant;
        let held = group
            .complete_task(tenant, &completion.task, &completion.lock_token)
            .await
            .map_err(task_error)?;
        group
            .deliver_output(tenant, &held, &completion.output)
            .await?;
        Ok(())
    }

    /// The first step of a new instance. There is no claim to take: the instance row does not
    /// exist until this member inserts it, unowned, together with the inbox row that makes the
    /// start exactly-once.
    async fn start(
        &self,
        group: &mut dyn Group,
        info: &InstanceInfo,
        message: &Message,
        consumed: Consumed,
        hold: bool,
    ) -> Result<Written, Error> {
        let (_, flow) = self
            .live
            .pinned(info)
            .ok_or_else(|| Error::Unpinned(describe(info)))?;
        let before = Snapshot::new(info.clone());
        let ctx = self.ctx(&info.tenant);
        let event = Event::Start {
            message: message.clone(),
        };
        let step = exec::apply(flow, &before, event, ctx).map_err(rejected)?;
        let pending = PendingCommit {
            kind: history_log::START,
            claim: None,
            held_by: None,
            answered: None,
            taken: None,
            consumed: Some(consumed),
            hold,
            take: None,
        };
        self.write(group, step, pending, ctx).await
    }

    async fn resume(
        &self,
        group: &mut dyn Group,
        key: &InstanceKey,
        resumption: Resumption,
    ) -> Result<Written, Error> {
        let claimed = self.claim(group, key).await?;
        fault::point("after-claim");
        debug!(instance = %key.id, owner = %self.owner.0, fence = claimed.token.fence, "claimed");
        self.advance_metered(group, claimed, resumption).await
    }

    /// Claims the instance and moves it onto `to_version`: the one step of a migration, so that
    /// it lands whole or not at all.
    async fn migrate(
        &self,
        group: &mut dyn Group,
        key: &InstanceKey,
        to_version: u32,
        map: &BTreeMap<String, String>,
    ) -> Result<Written, Error> {
        let claimed = self.claim(group, key).await?;
        fault::point("after-claim");
        let info = &claimed.snapshot.instance;
        let (_, from) = self
            .live
            .pinned(info)
            .ok_or_else(|| Error::Unpinned(describe(info)))?;
        let target = InstanceInfo {
            version: to_version,
            ..info.clone()
        };
        let (_, to) = self.live.pinned(&target).ok_or_else(|| {
            Error::Unmigratable(format!(
                "{} is not a loaded version, or has no flow `{}`: migrate onto an active or \
                 draining version of the deployment that has the instance's flow",
                describe(&target),
                info.flow
            ))
        })?;
        let ctx = self.ctx(&info.tenant);
        let step =
            exec::migrate(from, to, to_version, &claimed.snapshot, map, ctx).map_err(rejected)?;
        let pending = PendingCommit::of_claim(history_log::MIGRATE, claimed);
        self.write(group, step, pending, ctx).await
    }

    /// Claims the instance and fails it with `code`, the remedy for an instance whose steps keep
    /// dying (SPEC §5.2) or failing on one delivery (docs/decisions/0047). It passes no
    /// `after-claim` fault point: a death there, every time, is what it ends.
    async fn poison(
        &self,
        group: &mut dyn Group,
        key: &InstanceKey,
        code: Code,
        detail: &str,
    ) -> Result<Written, Error> {
        let claimed = self.claim(group, key).await?;
        let ctx = self.ctx(&key.tenant);
        let step = exec::fail(&claimed.snapshot, code.code, detail, ctx).map_err(rejected)?;
        let pending = PendingCommit::of_claim(history_log::POISON, claimed);
        self.write(group, step, pending, ctx).await
    }

    /// [`Stepper::advance`], counting a step that did not commit under its instance's flow.
    async fn advance_metered(
        &self,
        group: &mut dyn Group,
        claimed: Claimed,
        resumption: Resumption,
    ) -> Result<Written, Error> {
        let instance = claimed.snapshot.instance.clone();
        let started = self.shared.clock.instant();
        let advanced = self.advance(group, claimed, resumption).await;
        if let Err(error) = &advanced {
            self.shared.step_ended(
                &instance,
                outcome_label(error),
                self.shared.clock.elapsed(started),
            );
        }
        advanced
    }

    async fn claim(&self, group: &mut dyn Group, key: &InstanceKey) -> Result<Claimed, Error> {
        let timeout = self.shared.config.claim_timeout;
        group
            .claim(&key.tenant, &key.id, self.owner, timeout)
            .await
            .map_err(claim_error)
            .inspect_err(|error| self.refused(error, &key.tenant, &key.id))
    }

    /// Records a claim refused as held.
    fn refused(&self, error: &Error, tenant: &str, instance: &str) {
        if matches!(error, Error::Busy) {
            let me = &self.shared.config.replica_id;
            history_log::claim_refused(me, &self.owner.0, tenant, instance);
        }
    }

    async fn advance(
        &self,
        group: &mut dyn Group,
        claimed: Claimed,
        resumption: Resumption,
    ) -> Result<Written, Error> {
        let Resumption {
            kind,
            event,
            taken,
            consumed,
            hold,
            take,
        } = resumption;
        let info = &claimed.snapshot.instance;
        let (_, flow) = self
            .live
            .pinned(info)
            .ok_or_else(|| Error::Unpinned(describe(info)))?;
        fault::applying(&event);
        let answered = (event.park())
            .and_then(|park| claimed.snapshot.parks().find(|held| held.id == park))
            .map(Disarm::of);
        let ctx = self.ctx(&info.tenant);
        let step = exec::apply(flow, &claimed.snapshot, event, ctx).map_err(rejected)?;
        let pending = PendingCommit {
            kind,
            claim: Some(claimed.token),
            held_by: claimed.held_by,
            answered,
            taken,
            consumed,
            hold,
            take,
        };
        self.write(group, step, pending, ctx).await
    }

    /// Writes the step into the member. A correlation alias already taken (SPEC §7.2) is
    /// refused before anything is written, and the instance's failure is written instead.
    /// The instances the step calls are its tenant's live instances from now on, for its quota;
    /// counted before the commit, so that a commit that fails counts them until the next count.
    fn count_children(&self, step: &Step) {
        let calls = step.effects.iter();
        let calls = calls.filter(|effect| matches!(effect, Effect::Call { .. }));
        let tenant = &step.snapshot.instance.tenant;
        self.shared.live.started(tenant, calls.count() as u64);
    }

    async fn write(
        &self,
        group: &mut dyn Group,
        mut step: Step,
        pending: PendingCommit,
        ctx: StepContext,
    ) -> Result<Written, Error> {
        let instance = step.snapshot.instance.id.clone();
        let is_start = pending.claim.is_none();
        let hold = pending.hold.then(|| {
            let key = InstanceKey {
                tenant: step.snapshot.instance.tenant.clone(),
                id: instance.clone(),
            };
            self.shared.settle.register(&key)
        });
        let config = &self.shared.config;
        let me = &config.replica_id;
        let takers = takers(&step, pending.take.as_ref(), &self.shared.waiting, config);
        fault::point("before-commit");
        let mut rows = to_commit(&step, &pending, config, &takers.locks);
        self.count_children(&step);
        let mut result = group.commit_step(&rows).await;
        if let Err(sutra_store::Error::AliasTaken { channel, key }) = &result {
            step = fail_on_taken_alias(step, channel, key, ctx);
            rows = to_commit(&step, &pending, config, &takers.locks);
            result = group.commit_step(&rows).await;
        }
        let record = history_log::enabled().then(|| {
            history_log::Commit::of(
                &self.owner.0,
                pending.kind,
                &rows,
                pending.answered.map(|d| d.park),
            )
        });
        if let (Err(sutra_store::Error::ClaimLost), Some(token)) = (&result, &pending.claim) {
            let tenant = &step.snapshot.instance.tenant;
            history_log::claim_lost(me, &self.owner.0, tenant, &instance, token.fence);
        }
        match result {
            Ok(committed) => Ok(Written {
                record,
                untaken_tasks: step.effects.iter().filter(|e| arms_a_task(e)).count()
                    > committed.taken.len(),
                step,
                due_now: committed.due_now,
                taken: committed.taken,
                take: takers.take,
                handoffs: takers.handoffs,
                hold,
                is_start,
                started: self.shared.clock.instant(),
            }),
            // The hold, dropped, withdraws the caller: nobody waits on a step that did not commit.
            Err(error) => Err(error.into()),
        }
    }
}

/// An event for an existing instance, and what its step consumes.
pub(crate) struct Resumption {
    /// [`history_log::RESUME`] or [`history_log::COMPLETE`].
    pub kind: &'static str,
    pub event: Event,
    pub taken: Option<DeliveryId>,
    pub consumed: Option<Consumed>,
    pub hold: bool,
    /// A completion's worker asks for its next task.
    pub take: Option<Take>,
}

/// Whether a member that failed with `error` wrote nothing its group must not commit: a refusal
/// or a rejection, found before the step's first write (a claim whose row did not decode is
/// one). Any other error (a database error, a
/// panic) may have left the member half written, and fails its whole group.
pub(crate) fn fails_clean(error: &Error) -> bool {
    matches!(
        error,
        Error::Busy
            | Error::NotFound(_)
            | Error::Stale(_)
            | Error::InvalidState(_)
            | Error::Unpinned(_)
            | Error::TaskNotFound(_)
            | Error::LockLost(_)
            | Error::Unreadable(_)
            | Error::Store(sutra_store::Error::Duplicate(_))
            | Error::Store(sutra_store::Error::Waited { .. })
    )
}

/// The `outcome` label of a step that ran and did not commit.
pub(crate) fn outcome_label(error: &Error) -> &'static str {
    match error {
        Error::Stale(_) => metrics::STALE,
        Error::InvalidState(_) => metrics::REJECTED,
        Error::Unpinned(_) => metrics::UNPINNED,
        Error::Panicked => metrics::PANICKED,
        _ => metrics::FAILED,
    }
}

/// A refused claim as the engine says it; any other error as a task's ([`task_error`]).
///
/// A claim's row that does not decode is the instance's snapshot (its one JSON column), or its
/// mark that it could not be: unreadable, not corrupt at large (docs/decisions/0082).
fn claim_error(error: sutra_store::Error) -> Error {
    match error {
        sutra_store::Error::ClaimHeld => Error::Busy,
        sutra_store::Error::InstanceNotFound(id) => Error::NotFound(id),
        sutra_store::Error::Corrupt(why) => Error::Unreadable(why),
        other => task_error(other),
    }
}

pub(crate) fn task_error(error: sutra_store::Error) -> Error {
    match error {
        sutra_store::Error::TaskNotFound(id) => Error::TaskNotFound(id),
        sutra_store::Error::LockLost(detail) => Error::LockLost(detail),
        other => Error::Store(other),
    }
}

fn rejected(rejection: Rejection) -> Error {
    match rejection {
        Rejection::Stale(park) => {
            Error::Stale(format!("the instance no longer holds park {park:?}"))
        }
        Rejection::InvalidState { .. } => Error::InvalidState(rejection.to_string()),
        Rejection::Unmigratable(why) => Error::Unmigratable(why),
    }
}

fn describe(info: &InstanceInfo) -> String {
    format!(
        "{}/{} version {} (flow `{}`)",
        info.tenant, info.deployment, info.version, info.flow
    )
}
