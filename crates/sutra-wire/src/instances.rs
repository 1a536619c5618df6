//! `GET /v1/instances` and the routes under `/v1/instances/{id}`: snapshots, history, the
//! outbox, and the answers of the administrative operations.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Extra;

/// The query of `GET /v1/instances`; `None` means any.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(
    feature = "openapi",
    derive(utoipa::IntoParams),
    into_params(parameter_in = Query)
)]
pub struct InstanceQuery {
    /// `suspended`, `completed`, `cancelled` or `failed`.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::instance_status))]
    pub status: Option<String>,
    pub flow: Option<String>,
    /// Only instances pinned to this version of their deployment.
    pub version: Option<u32>,
    /// Only the instances this instance called (its children), whatever their status.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::parent))]
    pub parent: Option<String>,
    /// Only failed instances stopped at this failure code. Matched within each page the store
    /// reads, as a bulk filter is: a page may hold fewer than `limit` and still have a `next`.
    pub failure_code: Option<String>,
    /// Only instances with a token parked on a `receive` for this correlation key, matched
    /// within each page as `failure_code` is.
    pub correlation_key: Option<String>,
    /// Only instances created at or after this RFC 3339 instant.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::created_after))]
    pub created_after: Option<String>,
    /// Only instances created before this RFC 3339 instant.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::created_before))]
    pub created_before: Option<String>,
    /// At most this many (default 100; more than 500 is 500).
    pub limit: Option<u32>,
    /// The `next` cursor of the previous page.
    #[cfg_attr(feature = "openapi", param(schema_with = crate::rules::instance_cursor))]
    pub after: Option<String>,
}

/// An instance as `GET /v1/instances` lists it: what its row holds, without its variables and
/// tokens (read them with `GET /v1/instances/{id}`, or list with `vars=true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceSummary {
    pub id: String,
    pub tenant: String,
    pub flow: String,
    /// The deployment's name.
    pub deployment: String,
    /// The deployment version the instance is pinned to.
    pub version: u32,
    /// The id of the instance that called this one; absent for an instance a message started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// `running`, `suspended`, `completed`, `cancelled` or `failed`.
    pub status: String,
    /// Why it failed, while it is `failed`.
    pub failure: Option<Failure>,
    pub created_at: String,
    pub updated_at: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// An item of `GET /v1/instances`: its summary, or with `vars=true` the whole instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ListedInstance {
    // First: a whole instance would also read as a summary, its other members in `extra`.
    Whole(Instance),
    Summary(InstanceSummary),
}

/// `anyOf`, not the `oneOf` utoipa derives for an untagged enum: a whole instance also reads as
/// a summary (a summary's schema does not refuse the members it lacks), so it would match both,
/// which `oneOf` forbids (schemathesis: "valid under more than one of the schemas").
#[cfg(feature = "openapi")]
impl utoipa::PartialSchema for ListedInstance {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{AnyOfBuilder, Ref};
        AnyOfBuilder::new()
            .item(Ref::from_schema_name("Instance"))
            .item(Ref::from_schema_name("InstanceSummary"))
            .description(Some(
                "An item of `GET /v1/instances`: its summary, or with `vars=true` the whole \
                 instance.",
            ))
            .into()
    }
}

#[cfg(feature = "openapi")]
impl utoipa::ToSchema for ListedInstance {
    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::{PartialSchema, ToSchema};
        schemas.push((Instance::name().into(), Instance::schema()));
        <Instance as ToSchema>::schemas(schemas);
        schemas.push((InstanceSummary::name().into(), InstanceSummary::schema()));
        <InstanceSummary as ToSchema>::schemas(schemas);
    }
}

/// An instance snapshot (`GET /v1/instances/{id}`, and each item of the listing with
/// `vars=true`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Instance {
    pub id: String,
    pub tenant: String,
    pub flow: String,
    /// The deployment's name.
    pub deployment: String,
    /// The deployment version the instance is pinned to.
    pub version: u32,
    /// The instance that called this one and waits for it, at its `node`; absent for an
    /// instance a message started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<InstanceParent>,
    /// `running`, `suspended`, `completed`, `cancelled` or `failed`.
    pub status: String,
    pub vars: Value,
    pub tokens: Vec<Token>,
    pub failure: Option<Failure>,
    /// The completions of nodes that declared `compensate-with`, oldest first: `{node, within
    /// (the scopes it ran inside, innermost first), compensated}`. Absent while there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compensations: Vec<Value>,
    /// The last audit sequence number written: the instance's history has exactly this many
    /// events.
    pub audit_seq: u64,
    pub created_at: String,
    pub updated_at: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// The caller of a called instance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct InstanceParent {
    /// The calling instance's id.
    pub instance: String,
    /// The calling node.
    pub node: String,
    /// Calls between the instance a message started and this one: 1 for its child.
    pub depth: u32,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// A position in the flow graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Token {
    pub id: u64,
    pub node: String,
    /// The token that forked this one; `None` for the root token.
    #[serde(default)]
    pub parent: Option<u64>,
    /// `ready`, `parked`, `joining` (at a `parallel` or a `scope`), `racing` (at a `race`,
    /// waiting for its first arm), `looping` (at a `for-each`, waiting for its bodies) or
    /// `compensating` (at a `compensate`, waiting for its handlers).
    pub state: String,
    /// What the token waits for: `{"pending": n}` handlers still to run after the one running,
    /// when compensating; the park (an object with its `id` and a `kind` of `task`,
    /// `receive`, `wait` or `call` — a call's names the `child` instance and its `flow`, and its
    /// `failed` `{code, detail}` while it waits for that child's repair), `{"pending": n}` branches of a join, a loop's progress
    /// `{"items", "done", "running", "pending"}`, or `null` when ready or racing. Kept as JSON:
    /// the park's members are the snapshot's own, which grow with the flow language.
    pub park: Option<Value>,
    /// What the token is for besides being at its node: `{"role": "arm", "index": n}` (an arm
    /// of the race its `parent` waits at), `{"role": "reminder", "fired": n}` (the timer of the
    /// `remind` of the node its `parent` waits at), `{"role": "detached"}` (running a
    /// reminder's nodes), `{"role": "body", "index": n}` (the body for item `n` of the
    /// `for-each` its `parent` loops at), `{"role": "deadline"}` (the timer of that loop's or
    /// scope's deadline) or `{"role": "compensation", "entry": n}` (running the handler that
    /// undoes completion `n` for the `compensate` its `parent` waits at); absent for an
    /// ordinary token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Value>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// Why an instance failed (SPEC §7.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Failure {
    pub code: String,
    pub detail: String,
    /// The node that failed; `None` when no single node did (a poisoned step).
    #[serde(default)]
    pub node: Option<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// One audit event of an instance (`GET /v1/instances/{id}/history` answers a JSON array of
/// them); `seq` starts at 1 and has no gaps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct HistoryEvent {
    pub seq: u64,
    pub at: String,
    /// Such as `started`, `message_received` or `task_completed`.
    pub kind: String,
    pub node: Option<String>,
    pub token: Option<u64>,
    pub detail: Value,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// A message the instance emitted (`GET /v1/instances/{id}/outbox` answers a JSON array of
/// them, in emission order).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OutboxMessage {
    /// Stable across every attempt to send the message.
    pub idempotency_key: String,
    pub channel: String,
    /// The deployment version whose channel definition sends it.
    pub version: u32,
    pub message_key: Option<String>,
    pub data: Value,
    /// `pending` (waiting for its next attempt, or being sent), `sent`, or `poisoned` (past the
    /// channel's `max-attempts`: kept, never sent).
    pub state: String,
    pub attempts: u32,
    pub last_error: Option<String>,
    /// Set while `pending` only.
    pub next_attempt_at: Option<String>,
    pub sent_at: Option<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// The answer to an administrative operation (cancel, restore): the instance's status after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct StatusChange {
    pub instance: String,
    pub status: String,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

/// `POST /v1/instances/{id}/migrate`: the version to move onto, and where each token's node goes
/// there (a node not named keeps its id). A field it does not know is refused, not ignored: a
/// misspelt `map` would otherwise migrate with none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct MigrateBody {
    /// A deployment's versions count from 1.
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub to_version: u32,
    #[serde(default)]
    pub map: std::collections::BTreeMap<String, String>,
}

/// `POST /v1/instances/bulk`: one action on every instance the filter selects, a page at a time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkBody {
    #[serde(default)]
    pub filter: BulkFilter,
    /// `restore`, `cancel` or `migrate`.
    #[cfg_attr(feature = "openapi", schema(schema_with = crate::rules::bulk_action))]
    pub action: String,
    /// `migrate` only: the version to move onto, and where each token's node goes there.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(minimum = 1))]
    pub to_version: Option<u32>,
    #[serde(default)]
    pub map: std::collections::BTreeMap<String, String>,
    /// At most this many instances looked at (default 100, at most 500).
    #[serde(default)]
    pub limit: Option<u32>,
    /// The `next` of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    /// Select, and act on nothing: each selected instance is answered `matched`.
    #[serde(default)]
    pub dry_run: bool,
    /// `true` to `cancel` with an empty filter: every instance of the tenant. Without it such a
    /// cancel is refused (`SUTRA.ADMIN.CANCEL.UNFILTERED`), so that a filter lost on the way
    /// does not end all the tenant's work.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all: bool,
}

/// Which instances a bulk call acts on; every field is optional and narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct BulkFilter {
    #[cfg_attr(
        feature = "openapi",
        schema(schema_with = crate::rules::instance_status_or_null)
    )]
    pub status: Option<String>,
    pub flow: Option<String>,
    pub version: Option<u32>,
    pub failure_code: Option<String>,
    /// RFC 3339 instants.
    #[cfg_attr(
        feature = "openapi",
        schema(schema_with = crate::rules::created_before_or_null)
    )]
    pub created_before: Option<String>,
    #[cfg_attr(
        feature = "openapi",
        schema(schema_with = crate::rules::created_after_or_null)
    )]
    pub created_after: Option<String>,
}

/// A page of a bulk call: what became of each selected instance, and where the next page
/// starts (`null`: this was the last).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkAnswer {
    pub results: Vec<BulkResult>,
    pub next: Option<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct BulkResult {
    pub instance: String,
    /// `done`, `refused` (its code says why; retry what is retryable), `skipped` (its state no
    /// longer allows the action: done before, or moved on) or `matched` (a dry run).
    pub outcome: String,
    /// The instance's status after the action, when it was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(flatten)]
    #[cfg_attr(feature = "openapi", schema(ignore))]
    pub extra: Extra,
}
