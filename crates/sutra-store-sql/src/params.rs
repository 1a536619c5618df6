//! The parameters of each statement both dialects bind alike, written once, in the order the
//! backends' SQL numbers them (`$1`… on PostgreSQL, `?1`… on SQLite). A backend's statement
//! passes its own query text through one of these, then binds what only it binds — on SQLite,
//! the clock, numbered after every parameter here.

use serde_json::Value;
use sqlx::query::{Query, QueryAs, QueryScalar};
use sqlx::types::Json;
use sqlx::{Database, Encode, Type};
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot, Status};
use sutra_store::codec::{duration_micros, micros, park};
use sutra_store::{
    BufferedMessage, ClaimKind, ClaimToken, DeploymentStatus, InboxEntry, OutboxEntry, OutboxId,
    OutboxRetry, Result, TaskState,
};

use crate::{Correlation, InboxKey, NewDeliveryRow, NewVersion, TaskArm, WaitArm};

/// Binding the kinds of value the store's statements take, on any of sqlx's query types.
pub trait Bind<'q>: Sized {
    fn text(self, value: &'q str) -> Self;
    fn maybe_text(self, value: Option<&'q str>) -> Self;
    fn int(self, value: i64) -> Self;
    fn maybe_int(self, value: Option<i64>) -> Self;
    fn flag(self, value: bool) -> Self;
    fn json(self, value: Value) -> Self;
    fn json_ref(self, value: &'q Value) -> Self;
}

/// One impl per sqlx query type, each over any database that encodes the store's values.
macro_rules! bind_for {
    ($($query:ident [$($param:ident)?]),+) => {$(
        impl<'q, DB, $($param)?> Bind<'q> for $query<'q, DB, $($param,)? <DB as Database>::Arguments>
        where
            DB: Database,
            for<'t> &'t str: Encode<'t, DB> + Type<DB>,
            for<'t> Option<&'t str>: Encode<'t, DB> + Type<DB>,
            for<'t> i64: Encode<'t, DB> + Type<DB>,
            for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
            for<'t> bool: Encode<'t, DB> + Type<DB>,
            for<'t> Json<Value>: Encode<'t, DB> + Type<DB>,
            for<'t> Json<&'t Value>: Encode<'t, DB> + Type<DB>,
        {
            fn text(self, value: &'q str) -> Self {
                self.bind(value)
            }

            fn maybe_text(self, value: Option<&'q str>) -> Self {
                self.bind(value)
            }

            fn int(self, value: i64) -> Self {
                self.bind(value)
            }

            fn maybe_int(self, value: Option<i64>) -> Self {
                self.bind(value)
            }

            fn flag(self, value: bool) -> Self {
                self.bind(value)
            }

            fn json(self, value: Value) -> Self {
                self.bind(Json(value))
            }

            fn json_ref(self, value: &'q Value) -> Self {
                self.bind(Json(value))
            }
        }
    )+};
}

bind_for!(Query[], QueryAs[O], QueryScalar[O]);

/// A correlation key: tenant, channel, key.
pub fn correlation<'q, Q: Bind<'q>>(query: Q, on: Correlation<'q>) -> Q {
    query.text(on.tenant).text(on.channel).text(on.key)
}

/// A message's inbox key: tenant, channel, event id.
pub fn inbox_key<'q, Q: Bind<'q>>(query: Q, key: InboxKey<'q>) -> Q {
    query.text(key.tenant).text(key.channel).text(key.event_id)
}

/// An inbox row: tenant, channel, event id, instance, status.
pub fn inbox<'q, Q: Bind<'q>>(query: Q, tenant: &'q str, entry: &'q InboxEntry) -> Q {
    let key = InboxKey {
        tenant,
        channel: &entry.channel,
        event_id: &entry.event_id,
    };
    inbox_key(query, key)
        .maybe_text(entry.answer.instance.as_deref())
        .text(&entry.answer.status)
}

/// A step's settle: snapshot, status, tenant, id, the owner a durable claim wrote (none for a
/// locked claim, which wrote nothing), the fence the claim read, what the settle adds to it
/// (a durable claim grew it already; a locked one's step grows it here), who holds a caller now
/// (none: unchanged), and the version the instance runs on (a migration's step changes it).
pub fn settle<'q, Q: Bind<'q>>(
    query: Q,
    token: &'q ClaimToken,
    snapshot: &'q Snapshot,
    held_by: Option<&'q str>,
) -> Q {
    let (owner, growth) = match token.kind {
        ClaimKind::Durable => (Some(token.owner.0.as_str()), 0),
        ClaimKind::Locked => (None, 1),
    };
    query
        .json(snapshot.to_json())
        .text(snapshot.status.as_str())
        .text(&snapshot.instance.tenant)
        .text(&snapshot.instance.id)
        .maybe_text(owner)
        .int(token.fence)
        .int(growth)
        .maybe_text(held_by)
        .int(i64::from(snapshot.instance.version))
}

/// A new instance: id, tenant, deployment, version, flow, status, snapshot, who holds a caller.
pub fn instance<'q, Q: Bind<'q>>(query: Q, snapshot: &'q Snapshot, held_by: Option<&'q str>) -> Q {
    let instance = &snapshot.instance;
    query
        .text(&instance.id)
        .text(&instance.tenant)
        .text(&instance.deployment)
        .int(i64::from(instance.version))
        .text(&instance.flow)
        .text(snapshot.status.as_str())
        .json(snapshot.to_json())
        .maybe_text(held_by)
}

/// The park's task, cancellable: instance, park, the cancelled state, then the states a worker
/// may still take it in (available, locked).
pub fn cancel_task<'q, Q: Bind<'q>>(query: Q, instance: &'q str, park_id: ParkId) -> Result<Q> {
    Ok(query
        .text(instance)
        .int(park(park_id)?)
        .text(TaskState::Cancelled.as_str())
        .text(TaskState::Available.as_str())
        .text(TaskState::Locked.as_str()))
}

/// A correlation alias: tenant, channel, key, instance, park.
pub fn wait<'q, Q: Bind<'q>>(query: Q, wait: &WaitArm<'q>) -> Result<Q> {
    Ok(correlation(query, wait.on)
        .text(&wait.instance.id)
        .int(park(wait.park)?))
}

/// A park's task: id, tenant, instance, park, topic, input, state (available, or locked when a
/// worker took it), retries, backoff, lock, and the taker's lock token, expiry and name.
pub fn task<'q, Q: Bind<'q>>(query: Q, task: &'q TaskArm<'q>) -> Result<Q> {
    let taken = task.taken.as_ref();
    let state = match taken {
        Some(_) => TaskState::Locked,
        None => TaskState::Available,
    };
    Ok(query
        .text(&task.id)
        .text(&task.instance.tenant)
        .text(&task.instance.id)
        .int(park(task.park)?)
        .text(task.topic)
        .json_ref(task.input)
        .text(state.as_str())
        .int(i64::from(task.retries))
        .int(duration_micros(task.backoff))
        .int(duration_micros(task.lock))
        .maybe_text(taken.map(|taken| taken.lock_token.as_str()))
        .maybe_int(taken.map(|taken| micros(taken.expires_at)))
        .maybe_text(taken.map(|taken| taken.worker)))
}

/// An outbox row: tenant, instance, deployment, version, channel, payload, message key,
/// idempotency key.
pub fn outbox<'q, Q: Bind<'q>>(query: Q, instance: &'q InstanceInfo, entry: &'q OutboxEntry) -> Q {
    query
        .text(&instance.tenant)
        .text(&instance.id)
        .text(&instance.deployment)
        .int(i64::from(instance.version))
        .text(&entry.channel)
        .json_ref(&entry.payload)
        .maybe_text(entry.message_key.as_deref())
        .text(&entry.idempotency_key)
}

/// A delivery: tenant, instance, park, kind, payload.
pub fn delivery<'q, Q: Bind<'q>>(query: Q, delivery: &NewDeliveryRow<'q>) -> Result<Q> {
    let (kind, payload) = delivery.kind.encode();
    Ok(query
        .text(delivery.tenant)
        .text(delivery.instance)
        .int(park(delivery.park)?)
        .text(kind)
        .json(payload))
}

/// A buffered message: tenant, channel, key, event id, message, expiry.
pub fn buffered<'q, Q: Bind<'q>>(query: Q, tenant: &'q str, message: &'q BufferedMessage) -> Q {
    let on = Correlation {
        tenant,
        channel: &message.channel,
        key: &message.key,
    };
    correlation(query, on)
        .text(&message.message.id)
        .json(message.message.to_json())
        .int(micros(message.expires_at))
}

/// The active version of a deployment, to drain: tenant, name, the draining state, the active
/// state.
pub fn drain<'q, Q: Bind<'q>>(query: Q, tenant: &'q str, name: &'q str) -> Q {
    query
        .text(tenant)
        .text(name)
        .text(DeploymentStatus::Draining.as_str())
        .text(DeploymentStatus::Active.as_str())
}

/// What keeps a version from retiring, as its gate's statements bind it: the statuses of an
/// ended instance, the states of a live task, then tenant, name and version when the gate is
/// asked of one version.
pub fn ended_and_live<'q, Q: Bind<'q>>(query: Q) -> Q {
    query
        .text(Status::Completed.as_str())
        .text(Status::Cancelled.as_str())
        .text(TaskState::Available.as_str())
        .text(TaskState::Locked.as_str())
}

/// The retirement of draining versions: [`ended_and_live`], then the draining and retired
/// statuses.
pub fn retire<'q, Q: Bind<'q>>(query: Q) -> Q {
    ended_and_live(query)
        .text(DeploymentStatus::Draining.as_str())
        .text(DeploymentStatus::Retired.as_str())
}

/// A new deployment version: tenant, name, the active state, source.
pub fn version<'q, Q: Bind<'q>>(query: Q, version: &NewVersion<'q>) -> Q {
    query
        .text(version.tenant)
        .text(version.name)
        .text(DeploymentStatus::Active.as_str())
        .text(version.source)
}

/// A claim to give back: tenant, instance, owner, fence.
pub fn release<'q, Q: Bind<'q>>(
    query: Q,
    tenant: &'q str,
    instance: &'q str,
    token: &'q ClaimToken,
) -> Q {
    query
        .text(tenant)
        .text(instance)
        .text(&token.owner.0)
        .int(token.fence)
}

/// A failed send: the row's id, the error, when to send again (`NULL`: never), whether the row
/// is poisoned.
pub fn outbox_failure<'q, Q: Bind<'q>>(
    query: Q,
    id: OutboxId,
    error: &'q str,
    retry: OutboxRetry,
) -> Q {
    let (next_attempt_at, poisoned) = match retry {
        OutboxRetry::At(at) => (Some(micros(at)), false),
        OutboxRetry::Poison => (None, true),
    };
    query
        .int(id.0)
        .text(error)
        .maybe_int(next_attempt_at)
        .flag(poisoned)
}
