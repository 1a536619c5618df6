//! What the server holds a request's values to, as schema constraints (decision 0062): the task
//! surface's checks (`sutra_core::request`), the listings' and bulk selections' filters, the
//! cursors it gives. A field names one of these with `schema(schema_with = …)`, so that the
//! document says what the server refuses and a client generated from it builds requests the
//! server takes. This crate depends on no other, so the rules are restated here, and
//! `sutra-server`'s tests hold each to the server's own check.
//!
//! Where a rule is wider than a schema can say, the schema states the documented form, a part of
//! what the server takes: a duration as the server writes one (no lowercase, no leading zeros),
//! a worker's length in characters where the server counts 200 bytes of UTF-8.

use utoipa::openapi::schema::{ArrayBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
use utoipa::openapi::{RefOr, Schema, schema::SchemaType};

/// An ISO-8601 duration longer than zero, without years or months (which have no fixed length),
/// each count written without leading zeros and short enough that the whole stays within the
/// server's bound (`sutra_core::duration`).
fn positive_duration() -> String {
    const WEEKS: &str = "[1-9][0-9]{0,4}";
    const COUNT: &str = "[1-9][0-9]{0,5}";
    let seconds = format!("(?:{COUNT}(?:\\.[0-9]{{1,9}})?|0\\.[0-9]{{0,8}}[1-9])S");
    let time = format!("T(?:{COUNT}H(?:{COUNT}M)?(?:{seconds})?|{COUNT}M(?:{seconds})?|{seconds})");
    let date = format!("(?:{WEEKS}W(?:{COUNT}D)?|{COUNT}D)");
    format!("P(?:{date}(?:{time})?|{time})")
}

/// The pattern of a lock's length: longer than zero, or the task would be free again before
/// the answer arrived.
pub fn lock_pattern() -> String {
    format!("^{}$", positive_duration())
}

/// The pattern of a poll's wait: a lock's, or `PT0S` for none.
pub fn wait_pattern() -> String {
    format!("^(?:PT0S|{})$", positive_duration())
}

/// No control character (Unicode `Cc`) anywhere, and one character that is not whitespace.
pub const WORKER_PATTERN: &str =
    "^[^\\x00-\\x1F\\x7F-\\x9F]*[^\\s\\x00-\\x1F\\x7F-\\x9F][^\\x00-\\x1F\\x7F-\\x9F]*$";

/// A task topic: 1 to 200 letters, digits and `-_.:/`, starting with a letter or a digit.
pub const TOPIC_PATTERN: &str = "^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$";

/// An instance id, as the server writes one (a UUID, hyphenated).
pub const INSTANCE_ID_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$";

/// A task id, `{instance}:{park}`.
pub const TASK_ID_PATTERN: &str =
    "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}:[0-9]+$";

/// The statuses an instance listing or a bulk selection filters by: every status a stored
/// instance can rest in.
pub const INSTANCE_STATUSES: [&str; 4] = ["suspended", "completed", "cancelled", "failed"];

/// The states a task listing filters by.
pub const TASK_STATES: [&str; 6] = [
    "available",
    "locked",
    "completed",
    "failed",
    "terminal",
    "cancelled",
];

/// The actions of a bulk call.
pub const BULK_ACTIONS: [&str; 3] = ["restore", "cancel", "migrate"];

/// The most topics one poll names (`sutra_core::request::POLL_TOPICS_MAX`).
const TOPICS_MAX: usize = 100;

/// The longest worker id, in bytes (`sutra_core::request::WORKER_BYTES_MAX`): at most as many
/// characters.
const WORKER_MAX: usize = 200;

fn text(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
}

/// A body member that may be absent or `null`.
fn or_null(schema: ObjectBuilder) -> RefOr<Schema> {
    schema
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .into()
}

/// A poll's, or a completion's `take`'s, `worker`.
pub fn worker() -> RefOr<Schema> {
    text(
        "Who polls: 1 to 200 bytes of UTF-8, not only whitespace, no control characters. \
         Recorded on every task the poll locks.",
    )
    .min_length(Some(1))
    .max_length(Some(WORKER_MAX))
    .pattern(Some(WORKER_PATTERN))
    .into()
}

/// A poll's, or a completion's `take`'s, `topics`.
pub fn topics() -> RefOr<Schema> {
    let topic = text("A task topic, as a flow's `task` names it.").pattern(Some(TOPIC_PATTERN));
    ArrayBuilder::new()
        .items(topic)
        .min_items(Some(1))
        .max_items(Some(TOPICS_MAX))
        .description(Some("The topics to lock tasks of: 1 to 100."))
        .into()
}

/// A poll's, or a completion's `take`'s, `lock`.
pub fn lock() -> RefOr<Schema> {
    or_null(
        text(
            "How long each task stays locked, an ISO-8601 duration longer than zero such as \
             `PT1M`; the task's own `lock` when absent. A lock longer than the server's \
             ceiling (`sutra.tasks.max-lock`) is granted up to the ceiling, not refused: the \
             answer's `lock_expires_at` says when it ends.",
        )
        .pattern(Some(lock_pattern())),
    )
}

/// An extension's `lock`.
pub fn extension() -> RefOr<Schema> {
    text(
        "The lock's new length from now, an ISO-8601 duration longer than zero such as `PT1M`. \
         A lock longer than the server's ceiling (`sutra.tasks.max-lock`) is granted up to the \
         ceiling, not refused: the answer's `lock_expires_at` says when it ends.",
    )
    .pattern(Some(lock_pattern()))
    .into()
}

/// A poll's `wait`.
pub fn wait() -> RefOr<Schema> {
    or_null(
        text(
            "How long the server may hold the request open waiting for a task, an ISO-8601 \
             duration such as `PT20S` (at most a minute is waited); not at all when absent.",
        )
        .pattern(Some(wait_pattern())),
    )
}

fn one_of(values: &[&str], description: &str) -> ObjectBuilder {
    text(description).enum_values(Some(values.iter().copied()))
}

/// The status filter of the instance listing.
pub fn instance_status() -> RefOr<Schema> {
    one_of(&INSTANCE_STATUSES, "Only instances in this status.").into()
}

/// The status filter of a bulk selection.
pub fn instance_status_or_null() -> RefOr<Schema> {
    let mut values: Vec<Option<&str>> = INSTANCE_STATUSES.iter().copied().map(Some).collect();
    values.push(None);
    or_null(text("Only instances in this status.").enum_values(Some(values)))
}

/// The state filter of the task listing.
pub fn task_state() -> RefOr<Schema> {
    one_of(&TASK_STATES, "Only tasks in this state.").into()
}

/// A bulk call's `action`.
pub fn bulk_action() -> RefOr<Schema> {
    one_of(
        &BULK_ACTIONS,
        "`migrate` takes `to_version`; `restore` and `cancel` take none.",
    )
    .into()
}

fn instant(description: &str) -> ObjectBuilder {
    text(description).format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
}

/// The instance listing's `created_after`.
pub fn created_after() -> RefOr<Schema> {
    instant("Only instances created at or after this RFC 3339 instant.").into()
}

/// The instance listing's `created_before`.
pub fn created_before() -> RefOr<Schema> {
    instant("Only instances created before this RFC 3339 instant.").into()
}

/// A bulk selection's `created_after`.
pub fn created_after_or_null() -> RefOr<Schema> {
    or_null(instant(
        "Only instances created at or after this RFC 3339 instant.",
    ))
}

/// A bulk selection's `created_before`.
pub fn created_before_or_null() -> RefOr<Schema> {
    or_null(instant(
        "Only instances created before this RFC 3339 instant.",
    ))
}

/// The instance listing's `parent`.
pub fn parent() -> RefOr<Schema> {
    text("Only the instances this instance called (its children), whatever their status.")
        .pattern(Some(INSTANCE_ID_PATTERN))
        .into()
}

/// The instance listing's `after`.
pub fn instance_cursor() -> RefOr<Schema> {
    text("The `next` cursor of the previous page: an instance id.")
        .pattern(Some(INSTANCE_ID_PATTERN))
        .into()
}

/// The task listing's `after`.
pub fn task_cursor() -> RefOr<Schema> {
    text("The `next` cursor of the previous page: a task id.")
        .pattern(Some(TASK_ID_PATTERN))
        .into()
}
