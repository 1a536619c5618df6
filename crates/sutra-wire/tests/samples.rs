//! The contract pinned: each type against a sample of the wire form the server answers today.
//!
//! A sample decodes with nothing left over in `extra` (every member is a named field) and
//! encodes back to exactly itself, so renaming a field, changing its type or dropping a member
//! fails here before it reaches a client.

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sutra_wire::*;

/// Decodes `sample` as `T` and encodes it back, which must give `sample` again.
fn round_trip<T: Serialize + DeserializeOwned>(sample: Value) -> T {
    let decoded: T = serde_json::from_value(sample.clone()).expect("the sample decodes");
    let encoded = serde_json::to_value(&decoded).expect("the type encodes");
    assert_eq!(encoded, sample, "the wire form changed");
    decoded
}

#[test]
fn the_intake_answer_keeps_its_shape_with_and_without_an_instance() {
    let accepted: Accepted = round_trip(json!({
        "instance": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "status": "suspended", "dedup": false
    }));
    assert!(accepted.extra.is_empty());
    let buffered: Accepted =
        round_trip(json!({"instance": null, "status": "buffered", "dedup": true}));
    assert_eq!(buffered.instance, None);
}

#[test]
fn a_problem_keeps_its_members_and_its_extensions() {
    let problem: Problem = round_trip(json!({
        "type": "urn:sutra:error:SUTRA.INTAKE.VALIDATION",
        "title": "Message failed validation",
        "status": 422,
        "code": "SUTRA.INTAKE.VALIDATION",
        "detail": "the message's data is not valid for channel `orders` (1 problems)",
        "retryable": false,
        "violations": [{"pointer": "/amount", "message": "required"}],
    }));
    let violations: Vec<Violation> =
        serde_json::from_value(problem.extensions["violations"].clone()).unwrap();
    assert_eq!(violations[0].pointer, "/amount");
    let built = Problem::new(
        "SUTRA.STORE.CORRUPT",
        "Store data is corrupt",
        500,
        "x",
        false,
    );
    assert_eq!(built.type_uri, "urn:sutra:error:SUTRA.STORE.CORRUPT");
}

#[test]
fn a_deployment_has_warnings_when_deployed_and_source_when_read_alone() {
    let base = json!({
        "name": "shop", "tenant": "default", "version": 2, "status": "active",
        "created_at": "2026-12-01T08:00:00.123456Z",
    });
    let listed: Deployment = round_trip(base.clone());
    assert_eq!((listed.warnings, listed.source), (None, None));
    let mut deployed = base.clone();
    deployed["warnings"] = json!([{
        "file": "shop.yaml", "line": 3, "column": 5, "length": 7, "severity": "warning",
        "rule": "unreachable-node", "message": "node `late` is unreachable", "hint": null,
    }]);
    let deployed: Deployment = round_trip(deployed);
    assert!(deployed.warnings.unwrap()[0].extra.is_empty());
    let mut read = base;
    read["source"] = json!("name: shop\n");
    round_trip::<Deployment>(read.clone());
    read["status"] = json!("draining");
    read["retirement"] = json!({"instances": 1, "outbox": 0, "tasks": 2});
    let draining: Deployment = round_trip(read);
    assert_eq!(draining.retirement.map(|r| r.tasks), Some(2));
    round_trip::<Page<Deployment>>(json!({"items": [], "next": null}));
}

#[test]
fn an_instance_lists_its_tokens_parks_and_failure() {
    let instance: Instance = round_trip(json!({
        "id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "tenant": "default",
        "flow": "order",
        "deployment": "shop",
        "version": 1,
        "status": "failed",
        "vars": {"order": {"id": "o-1"}},
        "tokens": [
            {"id": 0, "node": "debit", "parent": null, "state": "parked",
             "park": {"id": 3, "kind": "task", "topic": "debit-account", "input": {},
                      "retries": 3, "backoff": "PT1S", "lock": "PT1M"}},
            {"id": 1, "node": "join", "parent": 0, "state": "joining", "park": {"pending": 2}},
            {"id": 2, "node": "check", "parent": 0, "state": "ready", "park": null},
        ],
        "failure": {"code": "SUTRA.RUNTIME.EXPRESSION.ERROR", "detail": "no such key", "node": "check"},
        "audit_seq": 7,
        "created_at": "2026-12-01T08:00:00Z",
        "updated_at": "2026-12-01T08:00:01Z",
    }));
    assert!(instance.extra.is_empty() && instance.tokens.iter().all(|t| t.extra.is_empty()));
    round_trip::<Page<Instance>>(json!({"items": [], "next": "0190a1b2"}));
}

#[test]
fn a_listed_instance_is_a_summary_unless_whole() {
    let summary = json!({
        "id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "tenant": "default",
        "flow": "ship",
        "deployment": "shop",
        "version": 1,
        "parent": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a50",
        "status": "failed",
        "failure": {"code": "NO.CARRIER", "detail": "none free", "node": "book"},
        "created_at": "2026-12-01T08:00:00Z",
        "updated_at": "2026-12-01T08:00:01Z",
    });
    let decoded: InstanceSummary = round_trip(summary.clone());
    assert!(decoded.extra.is_empty() && decoded.failure.unwrap().extra.is_empty());
    let listed: ListedInstance = round_trip(summary);
    assert!(matches!(listed, ListedInstance::Summary(_)));
    let whole: ListedInstance = round_trip(json!({
        "id": "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b", "tenant": "default", "flow": "order",
        "deployment": "shop", "version": 1, "status": "completed", "vars": {"n": 1},
        "tokens": [], "failure": null, "audit_seq": 3,
        "created_at": "2026-12-01T08:00:00Z", "updated_at": "2026-12-01T08:00:01Z",
    }));
    assert!(matches!(whole, ListedInstance::Whole(_)));
    round_trip::<Page<ListedInstance>>(json!({"items": [], "next": null}));
}

#[test]
fn history_outbox_and_status_changes_keep_their_shapes() {
    let history: Vec<HistoryEvent> = round_trip(json!([
        {"seq": 1, "at": "2026-12-01T08:00:00Z", "kind": "started", "node": null, "token": null,
         "detail": {"flow": "order"}},
        {"seq": 2, "at": "2026-12-01T08:00:00Z", "kind": "parked", "node": "debit", "token": 0,
         "detail": {}},
    ]));
    assert!(history[0].extra.is_empty());
    let outbox: Vec<OutboxMessage> = round_trip(json!([
        {"idempotency_key": "i:4:notify", "channel": "hooks", "version": 1, "message_key": null,
         "data": {"ok": true}, "state": "pending", "attempts": 1, "last_error": "HTTP 503",
         "next_attempt_at": "2026-12-01T08:00:05Z", "sent_at": null},
        {"idempotency_key": "i:5:notify", "channel": "hooks", "version": 1, "message_key": "k",
         "data": null, "state": "sent", "attempts": 1, "last_error": null,
         "next_attempt_at": null, "sent_at": "2026-12-01T08:00:06Z"},
    ]));
    assert!(outbox[0].extra.is_empty());
    round_trip::<StatusChange>(json!({"instance": "i", "status": "cancelled"}));
}

#[test]
fn task_requests_keep_their_fields_and_defaults() {
    round_trip::<PollBody>(json!({
        "worker": "w1", "topics": ["debit-account"], "max": 10, "lock": "PT1M", "wait": "PT20S"
    }));
    let sparse: PollBody =
        serde_json::from_value(json!({"worker": "w1", "topics": ["t"]})).unwrap();
    assert_eq!((sparse.max, sparse.lock, sparse.wait), (1, None, None));
    round_trip::<CompleteBody>(json!({"lock_token": "l", "output": {"reference": "r-1"}}));
    let bare: CompleteBody = serde_json::from_value(json!({"lock_token": "l"})).unwrap();
    assert_eq!(bare.output, Value::Null);
    round_trip::<FailBody>(json!({
        "lock_token": "l", "error": {"code": "LEDGER.DOWN", "message": "503"}, "retry": true
    }));
    let bare: FailBody =
        serde_json::from_value(json!({"lock_token": "l", "error": {"code": "X"}})).unwrap();
    assert!(bare.retry && bare.error.message.is_empty());
    round_trip::<ExtendBody>(json!({"lock_token": "l", "lock": "PT1M"}));
    round_trip::<ReleaseBody>(json!({"lock_token": "l"}));
    round_trip::<Vec<CompleteItem>>(json!([{"id": "i:3", "lock_token": "l", "output": {}}]));
    let bare: CompleteItem =
        serde_json::from_value(json!({"id": "i:3", "lock_token": "l"})).unwrap();
    assert_eq!(bare.output, Value::Null);
}

#[test]
fn a_batched_completion_answers_a_state_or_a_problem_per_item() {
    let batch: CompletedBatch = round_trip(json!({"items": [
        {"id": "i:3", "state": "completed"},
        {"id": "j:3", "error": {
            "type": "urn:sutra:error:SUTRA.TASK.LOCK.LOST", "title": "Task lock lost", "status": 409,
            "code": "SUTRA.TASK.LOCK.LOST", "detail": "the lock token does not match", "retryable": false,
        }},
    ]}));
    assert_eq!(batch.items[0].state.as_deref(), Some("completed"));
    assert_eq!(batch.items[0].error, None);
    assert_eq!(batch.items[1].state, None);
    assert!(batch.items[1].error.as_ref().unwrap().extensions.is_empty());
}

#[test]
fn task_answers_keep_their_shapes() {
    let locked: Vec<LockedTask> = round_trip(json!([{
        "id": "i:3", "topic": "debit-account", "instance": "i", "input": {"amount": 5},
        "attempt": 1, "lock_token": "l", "lock_expires_at": "2026-12-01T08:01:00Z",
    }]));
    assert!(locked[0].extra.is_empty());
    round_trip::<TaskState>(json!({"id": "i:3", "state": "completed"}));
    round_trip::<LockExtended>(json!({"id": "i:3", "lock_expires_at": "2026-12-01T08:02:00Z"}));
    let page: Page<TaskSummary> = round_trip(json!({"items": [{
        "id": "i:3", "topic": "debit-account", "instance": "i", "state": "locked", "attempt": 1,
        "retries": 3, "worker": "w1", "lock_expires_at": "2026-12-01T08:01:00Z",
        "created_at": "2026-12-01T08:00:00Z",
    }], "next": null}));
    assert!(page.items[0].extra.is_empty());
}

#[test]
fn leases_and_probes_keep_their_shapes() {
    let leases: Leases = round_trip(json!({
        "items": [{"role": "timers", "holder": "r1", "expires_at": "2026-12-01T08:00:30Z", "epoch": 4}],
        "next": null,
        "replica": "r1",
        "leading": ["timers"],
    }));
    assert!(leases.extra.is_empty() && leases.items[0].extra.is_empty());
    round_trip::<Health>(json!({"status": "ok"}));
    round_trip::<Readiness>(json!({"status": "ready", "lanes": [0, 2]}));
}

#[test]
fn schedules_keep_their_shape() {
    let schedules: Schedules = round_trip(json!({
        "items": [{
            "deployment": "reports", "flow": "nightly-report", "version": 3,
            "expression": "cron 0 2 * * *", "timezone": "Europe/Berlin",
            "next_at": "2026-12-06T01:00:00Z", "last_at": "2026-12-05T01:00:00Z",
            "last_instance": "0193a0c4-7f00-7000-8000-000000000001", "paused": false,
        }],
        "next": null,
    }));
    assert!(schedules.extra.is_empty() && schedules.items[0].extra.is_empty());
}

#[test]
fn queries_read_what_the_query_string_carries() {
    let query: InstanceQuery =
        serde_json::from_value(json!({"status": "failed", "limit": 5})).unwrap();
    assert_eq!(query.status.as_deref(), Some("failed"));
    assert_eq!(
        (query.flow, query.limit, query.after),
        (None, Some(5), None)
    );
    let query: TaskQuery = serde_json::from_value(json!({"topic": "t"})).unwrap();
    assert_eq!(query.topic.as_deref(), Some("t"));
}

#[test]
fn an_answer_keeps_members_a_newer_server_adds() {
    let accepted: Accepted = round_trip(json!({
        "instance": "i", "status": "suspended", "dedup": false, "trace": "t-1"
    }));
    assert_eq!(accepted.extra["trace"], "t-1");
}

#[test]
fn the_scaling_signal_names_each_count() {
    let scaling: sutra_wire::Scaling = round_trip(json!({
        "tenant": "acme", "inbox_backlog": 1, "outbox_backlog": 2,
        "tasks_available": {"debit": 3}, "tasks_locked": 4,
        "instances": {"suspended": 5, "failed": 6}, "claims_in_flight": 7,
    }));
    assert_eq!(scaling.tasks_available["debit"], 3);
    assert_eq!(
        scaling.tenant.as_deref(),
        Some("acme"),
        "an administrator's own figures"
    );
}

#[test]
fn the_system_history_names_each_figure_and_leaves_what_was_not_counted_null() {
    let history: SystemHistory = round_trip(json!({
        "replica": "sutra-7c1e", "since": "2026-12-06T02:00:00Z", "tenant": null,
        "interval": "PT10S", "window": "PT15M",
        "samples": [
            {
                "at": "2026-12-06T02:00:10Z", "seconds": 10.0, "steps": 120, "steps_failed": 1,
                "instances_failed": 2, "latency_p50": 0.0012, "latency_p99": 0.0081,
                "inbox_backlog": 0, "outbox_backlog": 3, "tasks_available": 17,
            },
            {
                "at": "2026-12-06T02:00:20Z", "seconds": 10.001, "steps": 0, "steps_failed": 0,
                "instances_failed": 0, "latency_p50": null, "latency_p99": null,
                "inbox_backlog": null, "outbox_backlog": null, "tasks_available": null,
            },
        ],
    }));
    assert_eq!(history.samples[0].tasks_available, Some(17));
    assert!(history.samples[1].extra.is_empty());
}
