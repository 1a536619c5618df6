//! From the store's and the engine's records to the wire vocabulary (`sutra-wire`, SPEC §4).
//!
//! Every answer body is built here, from the one set of types the client decodes, so the
//! server cannot answer a shape the client does not read. A record that cannot be rendered is a
//! [`Problem`], never a body with the offending part left out.

use jiff::Timestamp;
use serde_json::Value;
use sutra_core::diagnostic::Diagnostic;
use sutra_core::snapshot::{Failure, Token, TokenState};
use sutra_core::step::HistoryEvent;
use sutra_store::{
    DeploymentRecord, InstanceRecord, InstanceSummary, Lease, LockedTask, OutboxRecord,
    ScheduleRecord, TaskRecord, TaskState,
};
use sutra_wire::Extra;

use crate::problem::Problem;

type Result<T, E = Problem> = std::result::Result<T, E>;

pub fn deployment(record: &DeploymentRecord) -> sutra_wire::Deployment {
    sutra_wire::Deployment {
        name: record.name.clone(),
        tenant: record.tenant.clone(),
        version: record.version,
        status: record.status.as_str().to_owned(),
        created_at: record.created_at.to_string(),
        warnings: None,
        source: None,
        retirement: None,
        extra: Extra::new(),
    }
}

/// What keeps a draining version from retiring.
pub fn retirement(retirement: sutra_store::Retirement) -> sutra_wire::Retirement {
    sutra_wire::Retirement {
        instances: retirement.instances,
        outbox: retirement.outbox,
        tasks: retirement.tasks,
        extra: Extra::new(),
    }
}

/// A checker message located in `file`, the name the deploy was sent under.
pub fn diagnostic(diagnostic: &Diagnostic, file: &str) -> sutra_wire::Diagnostic {
    sutra_wire::Diagnostic {
        file: file.to_owned(),
        line: saturating(diagnostic.line),
        column: saturating(diagnostic.column),
        length: saturating(diagnostic.length),
        severity: diagnostic.severity.as_str().to_owned(),
        rule: diagnostic.rule.to_owned(),
        message: diagnostic.message.clone(),
        hint: diagnostic.hint.clone(),
        extra: Extra::new(),
    }
}

/// Positions in a document the intake size limit bounds; a count past `u32` cannot occur.
fn saturating(count: usize) -> u32 {
    u32::try_from(count).unwrap_or(u32::MAX)
}

/// The instance shape of SPEC §4.
pub fn instance(record: &InstanceRecord) -> Result<sutra_wire::Instance> {
    let snapshot = &record.snapshot;
    let tokens = snapshot
        .tokens
        .iter()
        .map(|t| token(t, &snapshot.instance.id))
        .collect::<Result<_>>()?;
    let failure = snapshot.failure.as_ref().map(failure);
    Ok(sutra_wire::Instance {
        id: snapshot.instance.id.clone(),
        tenant: snapshot.instance.tenant.clone(),
        flow: snapshot.instance.flow.clone(),
        deployment: snapshot.instance.deployment.clone(),
        version: snapshot.instance.version,
        parent: snapshot
            .instance
            .parent
            .as_ref()
            .map(|caller| sutra_wire::InstanceParent {
                instance: caller.instance.clone(),
                node: caller.node.clone(),
                depth: caller.depth,
                extra: Extra::new(),
            }),
        status: snapshot.status.as_str().to_owned(),
        vars: Value::Object(snapshot.vars.clone()),
        tokens,
        failure,
        compensations: (snapshot.compensations.iter())
            .map(|done| serde_json::json!({"node": done.node, "within": done.within, "compensated": done.compensated}))
            .collect(),
        audit_seq: snapshot.audit_seq,
        created_at: record.created_at.to_string(),
        updated_at: record.updated_at.to_string(),
        extra: Extra::new(),
    })
}

/// An instance as listed: its summary, nothing of its snapshot but its failure.
pub fn instance_summary(summary: &InstanceSummary) -> sutra_wire::InstanceSummary {
    sutra_wire::InstanceSummary {
        id: summary.id.clone(),
        tenant: summary.tenant.clone(),
        flow: summary.flow.clone(),
        deployment: summary.deployment.clone(),
        version: summary.version,
        parent: summary.parent.clone(),
        status: summary.status.as_str().to_owned(),
        failure: summary.failure.as_ref().map(failure),
        created_at: summary.created_at.to_string(),
        updated_at: summary.updated_at.to_string(),
        extra: Extra::new(),
    }
}

fn failure(failure: &Failure) -> sutra_wire::Failure {
    sutra_wire::Failure {
        code: failure.code.clone(),
        detail: failure.detail.clone(),
        node: failure.node.clone(),
        extra: Extra::new(),
    }
}

fn token(token: &Token, instance: &str) -> Result<sutra_wire::Token> {
    let (state, park) = match &token.state {
        TokenState::Ready => ("ready", None),
        TokenState::Parked(park) => {
            let park = serde_json::to_value(park).map_err(|e| {
                Problem::unrenderable(&format!("the park of instance {instance}"), e)
            })?;
            ("parked", Some(park))
        }
        TokenState::Joining { pending } => {
            ("joining", Some(serde_json::json!({"pending": pending})))
        }
        TokenState::Racing => ("racing", None),
        TokenState::Compensating { pending } => (
            "compensating",
            Some(serde_json::json!({"pending": pending.len()})),
        ),
        TokenState::Looping {
            items,
            next,
            running,
            ..
        } => {
            // Counts, not the items: a loop over thousands would drown the instance's page.
            let (items, started) = (items.len() as u64, u64::from(*next));
            let progress = serde_json::json!({
                "items": items,
                "done": started.saturating_sub(u64::from(*running)),
                "running": running,
                "pending": items.saturating_sub(started),
            });
            ("looping", Some(progress))
        }
    };
    let role = token
        .role
        .map(serde_json::to_value)
        .transpose()
        .map_err(|e| Problem::unrenderable(&format!("a token role of instance {instance}"), e))?;
    Ok(sutra_wire::Token {
        id: token.id.0,
        node: token.node.clone(),
        parent: token.parent.map(|parent| parent.0),
        state: state.to_owned(),
        park,
        role,
        extra: Extra::new(),
    })
}

pub fn history_event(event: &HistoryEvent, instance: &str) -> Result<sutra_wire::HistoryEvent> {
    let kind = serde_json::to_value(event.kind)
        .and_then(serde_json::from_value::<String>)
        .map_err(|e| Problem::unrenderable(&format!("a history kind of instance {instance}"), e))?;
    Ok(sutra_wire::HistoryEvent {
        seq: event.seq,
        at: event.at.to_string(),
        kind,
        node: event.node.clone(),
        token: event.token.map(|token| token.0),
        detail: event.detail.clone(),
        extra: Extra::new(),
    })
}

pub fn outbox_message(record: &OutboxRecord) -> sutra_wire::OutboxMessage {
    let state = match (record.sent_at, record.poisoned) {
        (Some(_), _) => "sent",
        (None, true) => "poisoned",
        (None, false) => "pending",
    };
    let next_attempt_at = (state == "pending").then(|| record.next_attempt_at.to_string());
    sutra_wire::OutboxMessage {
        idempotency_key: record.entry.idempotency_key.clone(),
        channel: record.entry.channel.clone(),
        version: record.version,
        message_key: record.entry.message_key.clone(),
        data: record.entry.payload.clone(),
        state: state.to_owned(),
        attempts: record.attempts,
        last_error: record.last_error.clone(),
        next_attempt_at,
        sent_at: record.sent_at.as_ref().map(Timestamp::to_string),
        extra: Extra::new(),
    }
}

pub fn locked_task(task: &LockedTask) -> sutra_wire::LockedTask {
    sutra_wire::LockedTask {
        id: task.id.clone(),
        topic: task.topic.clone(),
        instance: task.instance.clone(),
        input: task.input.clone(),
        attempt: task.attempt,
        lock_token: task.lock_token.clone(),
        lock_expires_at: task.lock_expires_at.to_string(),
        extra: Extra::new(),
    }
}

/// One item of a batched completion: completed, with the task locked for its worker if one
/// was, or the problem the same completion sent alone would have answered.
pub fn item_result(id: String, outcome: Result<Option<LockedTask>>) -> sutra_wire::ItemResult {
    let (state, taken, error) = match outcome {
        Ok(taken) => (
            Some(TaskState::Completed.as_str().to_owned()),
            taken.as_ref().map(locked_task),
            None,
        ),
        Err(problem) => (None, None, Some(problem.into_wire().1)),
    };
    sutra_wire::ItemResult {
        id,
        state,
        error,
        taken,
        extra: Extra::new(),
    }
}

pub fn task_summary(record: &TaskRecord) -> sutra_wire::TaskSummary {
    sutra_wire::TaskSummary {
        id: record.id.clone(),
        topic: record.topic.clone(),
        instance: record.instance.clone(),
        state: record.state.as_str().to_owned(),
        attempt: record.attempt,
        retries: record.retries,
        worker: record.worker.clone(),
        lock_expires_at: record.locked_until.as_ref().map(Timestamp::to_string),
        created_at: record.created_at.to_string(),
        extra: Extra::new(),
    }
}

pub fn schedule(record: &ScheduleRecord) -> sutra_wire::Schedule {
    sutra_wire::Schedule {
        deployment: record.deployment.clone(),
        flow: record.flow.clone(),
        version: record.version,
        expression: record.expression.clone(),
        timezone: record.zone.clone(),
        next_at: (record.next_at != Timestamp::MAX).then(|| record.next_at.to_string()),
        last_at: record.last_at.map(|at| at.to_string()),
        last_instance: record.last_instance.clone(),
        paused: record.paused,
        extra: Extra::new(),
    }
}

pub fn lease(lease: &Lease) -> sutra_wire::Lease {
    sutra_wire::Lease {
        role: lease.role.clone(),
        holder: lease.holder.clone(),
        expires_at: lease.expires_at.to_string(),
        epoch: lease.epoch,
        extra: Extra::new(),
    }
}
