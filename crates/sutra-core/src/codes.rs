//! Sutra's stable error codes (SPEC §10): `SUTRA.{AREA}.{OPERATION}.{REASON}`.
//!
//! This table is the single source of truth. The HTTP layer takes the status and the retry flag
//! from here, and `docs/errors.md` is checked against it by a test, so a code cannot be added,
//! changed or removed in one place only. Codes are never renamed: clients match on them.

/// One error code and what a caller should do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    pub code: &'static str,
    pub status: u16,
    /// Whether the same request may succeed if retried unchanged.
    pub retryable: bool,
    /// A short human title, used as the problem+json `title`.
    pub title: &'static str,
    /// What the caller should do.
    pub action: &'static str,
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.code)
    }
}

macro_rules! codes {
    ($($name:ident = ($code:literal, $status:literal, $retryable:literal, $title:literal, $action:literal);)*) => {
        $(pub const $name: Code = Code {
            code: $code, status: $status, retryable: $retryable, title: $title, action: $action,
        };)*
        /// Every code, in the order of the documentation table.
        pub const ALL: &[Code] = &[$($name),*];
    };
}

codes! {
    RESUME_CLAIM_HELD = ("SUTRA.RUNTIME.RESUME.CLAIM_HELD", 409, true,
        "Instance is busy",
        "Another step holds this instance's claim. Nothing was written; retry after the Retry-After delay.");
    MIGRATE_CLAIM_HELD = ("SUTRA.ADMIN.MIGRATE.CLAIM_HELD", 409, true,
        "Instance is busy",
        "A step is in progress on this instance. Nothing was read or written; retry the migration shortly.");
    RESTORE_CLAIM_HELD = ("SUTRA.ADMIN.RESTORE.CLAIM_HELD", 409, true,
        "Instance is busy",
        "A step is in progress on this instance. Nothing was read or written; retry the restore shortly.");
    MIGRATE_INVALID = ("SUTRA.ADMIN.MIGRATE.INVALID", 422, false,
        "Migration does not fit the instance",
        "A token would land on no node of the target version, the map names a node that does not exist, or a waiting token would land on a node of another kind. Nothing was written; fix the map (the detail names the token or entry) and migrate again.");
    CANCEL_CLAIM_HELD = ("SUTRA.ADMIN.CANCEL.CLAIM_HELD", 409, true,
        "Instance is busy",
        "A step is in progress on this instance. Nothing was read or written; retry the cancel shortly.");
    CANCEL_UNFILTERED = ("SUTRA.ADMIN.CANCEL.UNFILTERED", 400, false,
        "Bulk cancel of every instance not confirmed",
        "The filter is empty, so the cancel would end every instance of your tenant. Nothing was read or written; narrow the filter (status, flow, version, failure_code, created_before, created_after), count what it selects with `dry_run`, or send `\"all\": true` to cancel every instance.");
    RELAY_NO_MATCH = ("SUTRA.RUNTIME.RELAY.NO_MATCH", 404, false,
        "No instance waits for this message",
        "No receive waits on this channel and key, and no flow starts on the channel. Check the correlation key, or declare `buffer` on the channel to keep early messages.");
    RELAY_STALE = ("SUTRA.RUNTIME.RELAY.STALE", 409, true,
        "The wait moved on",
        "The receive this message was correlated to was answered or resolved just before the message could be applied. Nothing was applied and the message was not consumed; send it again unchanged and it is correlated afresh.");
    INTAKE_DECODE = ("SUTRA.INTAKE.DECODE", 400, false,
        "Message is not a valid CloudEvent",
        "Send a CloudEvents 1.0 JSON event (specversion, id, type, source, data) or binary mode with ce-id, ce-type and ce-source headers.");
    INTAKE_CHANNEL_UNKNOWN = ("SUTRA.INTAKE.CHANNEL.UNKNOWN", 404, false,
        "No such channel",
        "No active deployment declares this channel. Check the name, or deploy a document that declares it.");
    INTAKE_CHANNEL_TRANSPORT = ("SUTRA.INTAKE.CHANNEL.TRANSPORT", 409, false,
        "Channel takes its messages from a broker",
        "This channel is declared with `transport: amqp` or `nats`: its messages come from its queue or stream, not over HTTP. Publish the message to the broker, or send it to an http channel.");
    INTAKE_VALIDATION = ("SUTRA.INTAKE.VALIDATION", 422, false,
        "Message failed validation",
        "Fix the message so that its data matches the channel's schema; every violation is listed with its JSON pointer.");
    CORRELATION_ALIAS_TAKEN = ("SUTRA.RUNTIME.CORRELATION.ALIAS_TAKEN", 409, false,
        "Correlation key already taken",
        "Another instance already waits on this channel and key; the instance that tried to park on it failed. Make receive keys unique, then migrate and restore the instance.");
    FOR_EACH_NOT_A_LIST = ("SUTRA.RUNTIME.FOR_EACH.NOT_A_LIST", 422, false,
        "For-each items are not a list",
        "The `items` of a `for-each` gave something other than a list; the instance failed at the node. Fix the expression (or the data it reads), deploy, migrate and restore the instance.");
    FOR_EACH_TOO_MANY_ITEMS = ("SUTRA.RUNTIME.FOR_EACH.TOO_MANY_ITEMS", 422, false,
        "Too many for-each items",
        "The `items` of a `for-each` gave more items than `sutra.for-each.max-items` (default 10,000) allows; the instance failed at the node. Split the list (a for-each over chunks), or raise the ceiling; then restore the instance.");
    CALL_CHILDREN_EXCEEDED = ("SUTRA.RUNTIME.CALL.CHILDREN_EXCEEDED", 422, false,
        "Too many calls at once",
        "A `call` (or a `for-each` of calls) would make the instance wait for more children at once than `sutra.call.max-children` (default 10,000) allows; the call went to the node's `on-error`, or failed the instance there. Call fewer at once (a `for-each` with `concurrency`), or raise the ceiling; then restore the instance.");
    CALL_DEPTH_EXCEEDED = ("SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED", 422, false,
        "Calls nested too deep",
        "A `call` would nest deeper than `sutra.call.max-depth` (default 16) below the instance a message started; the call went to the node's `on-error`, or failed the instance there. End the recursion with a choice (or raise the ceiling), deploy, migrate and restore the instance.");
    CALL_CANCELLED = ("SUTRA.RUNTIME.CALL.CANCELLED", 422, false,
        "Called instance cancelled",
        "The instance a `call` waited for was cancelled by someone else; the caller went to the node's `on-error`, or failed there. Restore the caller to call the flow again with a new instance.");
    COMPENSATION_FAILED = ("SUTRA.RUNTIME.COMPENSATION.FAILED", 422, false,
        "Compensation handler failed",
        "A compensation handler failed; compensation stopped at it and the instance failed. Repair the cause (a migration onto a fixed version if the handler is wrong), then restore the instance: the failed handler runs again and compensation goes on, without re-running the handlers that completed.");
    CHOICE_NO_MATCH = ("SUTRA.RUNTIME.CHOICE.NO_MATCH", 422, false,
        "No choice guard matched",
        "No `when` guard was true and the choice has no `otherwise`. Add an `otherwise`, deploy the fix, migrate and restore the instance.");
    STEP_BUDGET_EXCEEDED = ("SUTRA.RUNTIME.STEP.BUDGET_EXCEEDED", 422, false,
        "Step exceeded its transition budget",
        "The flow visited too many nodes in one step (an endless loop?). Fix the loop, deploy, migrate and restore the instance.");
    STEP_POISONED = ("SUTRA.RUNTIME.STEP.POISONED", 500, false,
        "Step keeps crashing",
        "The instance's step died with its replica too many times in a row. Inspect its history and logs, fix the cause, then restore it.");
    STEP_PANICKED = ("SUTRA.RUNTIME.STEP.PANICKED", 500, true,
        "Step failed unexpectedly",
        "The step hit a bug and was abandoned; its claim was released and nothing was written. Retry; if it persists, report it with the server log.");
    DELIVERY_EXHAUSTED = ("SUTRA.RUNTIME.DELIVERY.EXHAUSTED", 500, false,
        "Delivery keeps failing",
        "The instance's step failed on the same delivery (a timer, a task's outcome, a relayed message, a restore) `sutra.deliveries.max-attempts` times; the detail names it and the last error. Fix the cause (a bug, a corrupt row), then restore the instance.");
    ENGINE_UNAVAILABLE = ("SUTRA.RUNTIME.ENGINE.UNAVAILABLE", 503, true,
        "Engine unavailable",
        "This replica is shutting down, has not loaded the instance's deployment version yet, or (on `/readyz`) cannot make progress: a wedged lane, or a broker channel it cannot consume, which the detail names. Retry, possibly on another replica.");
    RECEIVE_TIMEOUT = ("SUTRA.RUNTIME.RECEIVE.TIMEOUT", 422, false,
        "Receive timed out",
        "No message arrived before the receive's timeout and it has no `on-timeout` or `on-error`. Add one, deploy, migrate and restore the instance.");
    EXPRESSION_ERROR = ("SUTRA.RUNTIME.EXPRESSION.ERROR", 422, false,
        "Expression failed",
        "An expression failed on this instance's data (a missing field, a wrong type). Fix the flow or the data, deploy, migrate and restore the instance.");
    TENANT_LIVE_INSTANCES = ("SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED", 429, true,
        "Too many live instances",
        "The tenant has as many live instances (created or suspended) as `sutra.tenants.max-live-instances` (default 1,000,000) allows, as last counted (every 10 s); nothing was started. Send again once some have ended, cancel what should not run, or raise the limit. A `call` past it goes to the node's `on-error`, or fails the instance, with this code.");
    EXPRESSION_BUDGET = ("SUTRA.RUNTIME.EXPRESSION.BUDGET", 422, false,
        "Expression over budget",
        "The step's expressions did more work than `sutra.expressions.max-cost` (default 1,000,000 units, about a value cell each) allows, or one produced a value larger than `sutra.expressions.max-value-bytes` (default 1 MiB of JSON). Loop over less (a `for-each` of smaller pieces, or a lookup by key instead of a comprehension), or raise the limit; then restore the instance.");
    VARS_TOO_LARGE = ("SUTRA.RUNTIME.VARS.TOO_LARGE", 422, false,
        "Variables too large",
        "A node would grow the instance's variables past `sutra.instance.max-vars-bytes` (default 4 MiB of JSON); nothing of the node was assigned. Keep large data outside the instance (store it and keep its reference), or raise the limit; then restore the instance.");
    NODE_UNKNOWN = ("SUTRA.RUNTIME.NODE.UNKNOWN", 500, false,
        "Instance is at an unknown node",
        "The instance is at a node its flow version does not have (a migration that did not map it?). Migrate it onto a version that has the node, mapping the node if needed, then restore it.");
    TASK_LOCK_LOST = ("SUTRA.TASK.LOCK.LOST", 409, false,
        "Task lock lost",
        "The lock token is wrong or expired, or the task was already completed; another worker may hold it now. Drop the result and poll again.");
    TASK_RETRIES_EXHAUSTED = ("SUTRA.TASK.RETRIES.EXHAUSTED", 422, false,
        "Task retries exhausted",
        "The task failed past its retry budget. Fix the worker's problem, then restore the instance to run the task with a fresh budget.");
    TASK_NOT_FOUND = ("SUTRA.TASK.NOT_FOUND", 404, false,
        "Task not found",
        "No task has this id in your tenant. Task ids are `{instance}:{park}` as poll returns them; list tasks with `GET /v1/tasks`.");
    DEPLOY_INVALID = ("SUTRA.DEPLOY.INVALID", 400, false,
        "Deployment is invalid",
        "Fix the errors listed (each names a line and column); `sutra check FILE` shows the same messages offline.");
    DEPLOY_NOT_FOUND = ("SUTRA.DEPLOY.NOT_FOUND", 404, false,
        "Deployment not found",
        "No deployment has this name and version in your tenant. List them with `GET /v1/deployments`.");
    INSTANCE_NOT_FOUND = ("SUTRA.INSTANCE.NOT_FOUND", 404, false,
        "Instance not found",
        "No instance has this id in your tenant. Check the id with `sutra instances list`.");
    SCHEDULE_NOT_FOUND = ("SUTRA.SCHEDULE.NOT_FOUND", 404, false,
        "Schedule not found",
        "No flow of this deployment's active version in your tenant has a schedule. List them with `sutra schedules list` (`GET /v1/schedules`).");
    ADMIN_STATE_INVALID = ("SUTRA.ADMIN.STATE.INVALID", 409, false,
        "Operation not allowed in this state",
        "The instance's status does not allow this operation (only `failed` instances can be restored; ended instances cannot be cancelled).");
    AUTH_UNAUTHENTICATED = ("SUTRA.AUTH.UNAUTHENTICATED", 401, false,
        "Authentication required",
        "Send `Authorization: Bearer <token>` with a token from `sutra.auth.tokens`.");
    AUTH_FORBIDDEN = ("SUTRA.AUTH.FORBIDDEN", 403, false,
        "Not allowed",
        "Your token's roles do not allow this call. Use a token with the needed role (admin, worker or sender for a tenant's routes; admin or operator for the fleet's views).");
    API_REQUEST_INVALID = ("SUTRA.API.REQUEST.INVALID", 400, false,
        "Bad request",
        "A query parameter or body field is malformed; the detail names it and the accepted values.");
    API_ROUTE_NOT_FOUND = ("SUTRA.API.ROUTE.NOT_FOUND", 404, false,
        "No such endpoint",
        "Check the method and path against the API reference (`GET /openapi.json`).");
    STORE_UNAVAILABLE = ("SUTRA.STORE.UNAVAILABLE", 503, true,
        "Store unavailable",
        "The database could not be reached or refused the commit. Nothing was half-written; retry with backoff.");
    STORE_CORRUPT = ("SUTRA.STORE.CORRUPT", 500, false,
        "Store data is corrupt",
        "A stored row could not be decoded, or a write broke one of the schema's constraints: a bug or a manual edit of the database, which no retry can fix. Copy the database before changing anything, then report the detail with the server log.");
}

/// The code named `code`, if it is one of Sutra's.
pub fn lookup(code: &str) -> Option<Code> {
    ALL.iter().copied().find(|c| c.code == code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_well_formed() {
        for (i, code) in ALL.iter().enumerate() {
            let parts: Vec<&str> = code.code.split('.').collect();
            assert!(
                matches!(parts.len(), 3 | 4),
                "{code}: SUTRA.AREA[.OPERATION].REASON"
            );
            assert_eq!(parts[0], "SUTRA");
            assert!(
                parts
                    .iter()
                    .all(|p| p.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            );
            assert!((400..600).contains(&code.status), "{code}");
            assert!(
                ALL[..i].iter().all(|other| other.code != code.code),
                "{code} twice"
            );
        }
    }

    #[test]
    fn the_documentation_table_lists_every_code_as_the_code_says() {
        let doc = include_str!("../../../docs/errors.md");
        let rows: Vec<&str> = doc.lines().filter(|l| l.starts_with("| `SUTRA.")).collect();
        assert_eq!(
            rows.len(),
            ALL.len(),
            "docs/errors.md must have one row per code"
        );
        for (row, code) in rows.iter().zip(ALL) {
            let expected = format!(
                "| `{}` | {} | {} | {} |",
                code.code,
                code.status,
                if code.retryable { "yes" } else { "no" },
                code.action
            );
            assert_eq!(
                *row, expected,
                "docs/errors.md is out of date; regenerate it"
            );
        }
    }
}
