//! End-to-end: external tasks (SPEC §5.5) on a real `sutra serve`, worked by raw HTTP calls the
//! way a worker in any language would make them.
//!
//! A flow of tasks completes; every way a worker can get it wrong is refused with its code and
//! changes nothing; failures go to `on-error` or fail the instance; long-polls return as soon as
//! a task is there rather than when their wait runs out. Waits are long (PT30S) and asserted
//! against generously, so that a slow machine makes these tests slower, never red. A lapsed
//! lock handing its task to the next worker is shown on a manual clock, in the engine's
//! in-process tier (`crates/sutra-engine/tests/time.rs`).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, assert_audit_sequence_is_whole, count_kind, serve};

const FLOWS: &str = r#"
name: tasks
channels:
  transfers:
    transport: http
    correlate: data.id
  strict-requests:
    transport: http
    correlate: data.id
flows:
  transfer:
    start: { channel: transfers }
    nodes:
      - id: debit
        task: { topic: debit, input: { account: "= vars.input.from", amount: "= vars.input.amount" }, retries: 1, backoff: PT0.1S }
        output: debit
        on-error: rescue
      - id: credit
        task: { topic: credit, input: { account: "= vars.input.to" } }
        output: credit
      - id: done
        end: { reply: { ok: true } }
      - id: rescue
        end: { reply: { rescued: "= vars.error.code" } }
  strict:
    start: { channel: strict-requests }
    nodes:
      - id: only
        task: { topic: strict, input: { id: "= vars.input.id" }, retries: 0 }
"#;

/// Long enough that returning "well before" it cannot be luck.
const LONG_WAIT: &str = "PT30S";
/// A bound far above what a healthy long-poll needs to notice a task, far below [`LONG_WAIT`].
const PROMPTLY: Duration = Duration::from_secs(15);

async fn start_transfer(server: &Server, id: &str) -> String {
    let data = json!({"id": id, "from": "a-1", "to": "b-2", "amount": 10});
    let (status, body) = server
        .send("transfers", &format!("transfer-{id}"), data)
        .await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// Polls `topic` with the request's other fields from `extra`; returns the tasks.
async fn poll(server: &Server, worker: &str, topic: &str, extra: Value) -> Vec<Value> {
    let mut body = json!({"worker": worker, "topics": [topic]});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    let (status, tasks) = server.post_json("/v1/tasks/poll", &body).await;
    assert_eq!(status, 200, "{tasks}");
    tasks.as_array().cloned().expect("poll answers an array")
}

/// Long-polls `topic` for exactly one task.
async fn poll_one(server: &Server, worker: &str, topic: &str, extra: Value) -> Value {
    let mut extra = extra;
    extra["wait"] = json!(LONG_WAIT);
    let tasks = poll(server, worker, topic, extra).await;
    assert_eq!(tasks.len(), 1, "one task, not {tasks:?}");
    tasks[0].clone()
}

async fn answer(server: &Server, task: &Value, verb: &str, body: Value) -> (u16, Value) {
    let id = task["id"].as_str().expect("a task id");
    server
        .post_json(&format!("/v1/tasks/{id}/{verb}"), &body)
        .await
}

async fn complete(server: &Server, task: &Value, output: Value) -> (u16, Value) {
    let body = json!({"lock_token": task["lock_token"], "output": output});
    answer(server, task, "complete", body).await
}

async fn fail(server: &Server, task: &Value, code: &str, retry: bool) -> (u16, Value) {
    let error = json!({"code": code, "message": format!("{code} from the worker")});
    let body = json!({"lock_token": task["lock_token"], "error": error, "retry": retry});
    answer(server, task, "fail", body).await
}

/// The item of a batched completion that completes `task` with `output`.
fn item(task: &Value, output: Value) -> Value {
    json!({"id": task["id"], "lock_token": task["lock_token"], "output": output})
}

async fn complete_batch(server: &Server, items: Value) -> (u16, Value) {
    server.post_json("/v1/tasks/complete", &items).await
}

/// `task` is still locked as worker `w1`'s poll left it, and its instance still waits on it.
async fn assert_untouched(server: &Server, task: &Value) {
    let (_, locked) = server.get("/v1/tasks?state=locked").await;
    let listed = locked["items"]
        .as_array()
        .and_then(|items| items.iter().find(|listed| listed["id"] == task["id"]));
    assert_eq!(
        listed.map(|listed| (&listed["attempt"], &listed["worker"])),
        Some((&task["attempt"], &json!("w1"))),
        "{locked}"
    );
    let instance = task["instance"]
        .as_str()
        .expect("a task names its instance");
    assert_eq!(
        server.instance(instance).await["tokens"][0]["node"],
        "debit"
    );
    let history = server.history(instance).await;
    assert_eq!(count_kind(&history, "task_completed"), 0, "{history:?}");
}

#[track_caller]
fn assert_problem(answer: &(u16, Value), status: u16, code: &str) {
    assert_eq!(
        (answer.0, answer.1["code"].as_str()),
        (status, Some(code)),
        "{}",
        answer.1
    );
}

#[tokio::test]
async fn a_flow_of_tasks_completes_when_workers_poll_and_complete_over_http() {
    let scratch = Scratch::new("tasks-flow");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;

    let debit = poll_one(&server, "w1", "debit", json!({"lock": "PT1M"})).await;
    assert_eq!(debit["id"], format!("{instance}:1").as_str(), "{debit}");
    assert_eq!(
        (&debit["topic"], &debit["instance"], &debit["attempt"]),
        (&json!("debit"), &json!(instance), &json!(1))
    );
    assert_eq!(debit["input"], json!({"account": "a-1", "amount": 10}));
    assert!(debit["lock_expires_at"].is_string(), "{debit}");
    let (_, listed) = server.get("/v1/tasks?state=locked").await;
    assert_eq!(listed["items"][0]["id"], debit["id"], "{listed}");
    assert_eq!(listed["items"][0]["worker"], "w1", "{listed}");
    assert_eq!(listed["items"][0]["retries"], 1, "{listed}");

    let answer = complete(&server, &debit, json!({"debited": 10})).await;
    assert_eq!(
        answer,
        (200, json!({"id": debit["id"], "state": "completed"}))
    );
    let credit = poll_one(&server, "w2", "credit", json!({})).await;
    assert_eq!(credit["input"], json!({"account": "b-2"}));
    let answer = complete(&server, &credit, json!({"credited": 10})).await;
    assert_eq!(answer.0, 200, "{}", answer.1);

    let finished = server.wait_for_status(&instance, "completed").await;
    assert_eq!(finished["vars"]["debit"], json!({"debited": 10}));
    assert_eq!(finished["vars"]["credit"], json!({"credited": 10}));
    let history = server.history(&instance).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(count_kind(&history, "task_completed"), 2, "{history:?}");
    let (_, done) = server.get("/v1/tasks?state=completed&topic=debit").await;
    assert_eq!(done["items"].as_array().map(Vec::len), Some(1), "{done}");
    assert_eq!(done["next"], Value::Null);
}

#[tokio::test]
async fn a_completion_resumes_its_instance_before_it_is_answered() {
    // Decision 0024: with the instance's claim free, the completion and the resuming step are
    // one transaction, so the worker's answer implies the instance has moved on — the next task
    // is there to take at once, with no dispatcher in between and no wait.
    let scratch = Scratch::new("tasks-in-place");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "p1").await;
    let debit = poll_one(&server, "w", "debit", json!({})).await;
    let (status, body) = complete(&server, &debit, json!({"ok": true})).await;
    assert_eq!(status, 200, "{body}");

    let credit = poll(&server, "w", "credit", json!({"wait": "PT0S"})).await;
    assert_eq!(
        credit.len(),
        1,
        "the credit task was not armed by the completion's own step"
    );
    let history = server.history(&instance).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(count_kind(&history, "task_completed"), 1, "{history:?}");
}

#[tokio::test]
async fn a_wrong_or_expired_lock_token_is_refused_and_changes_nothing() {
    let scratch = Scratch::new("tasks-tokens");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let short = poll_one(&server, "w1", "debit", json!({"lock": "PT0.05S"})).await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let expired = complete(&server, &short, json!({})).await;
    assert_problem(&expired, 409, "SUTRA.TASK.LOCK.LOST");
    assert_eq!(expired.1["retryable"], false);

    let held = poll_one(&server, "w2", "debit", json!({"lock": "PT5M"})).await;
    assert_eq!(held["attempt"], 2, "the expired lock was an attempt");
    let mut forged = held.clone();
    forged["lock_token"] = json!("not-the-token");
    assert_problem(
        &complete(&server, &forged, json!({})).await,
        409,
        "SUTRA.TASK.LOCK.LOST",
    );
    assert_problem(
        &fail(&server, &forged, "X", true).await,
        409,
        "SUTRA.TASK.LOCK.LOST",
    );
    let extend = json!({"lock_token": "not-the-token", "lock": "PT1M"});
    assert_problem(
        &answer(&server, &held, "extend", extend).await,
        409,
        "SUTRA.TASK.LOCK.LOST",
    );
    let mut unknown = held.clone();
    unknown["id"] = json!(format!("{instance}:99"));
    assert_problem(
        &complete(&server, &unknown, json!({})).await,
        404,
        "SUTRA.TASK.NOT_FOUND",
    );

    let extend = json!({"lock_token": held["lock_token"], "lock": "PT10M"});
    let (status, extended) = answer(&server, &held, "extend", extend).await;
    assert_eq!(status, 200, "{extended}");
    assert_eq!(extended["id"], held["id"]);
    assert!(
        extended["lock_expires_at"].as_str() > held["lock_expires_at"].as_str(),
        "{extended} vs {held}"
    );
    assert_eq!(complete(&server, &held, json!({"n": 1})).await.0, 200);
    server.wait_for_node(&instance, "credit").await;
    assert_eq!(
        count_kind(&server.history(&instance).await, "task_completed"),
        1
    );
}

#[tokio::test]
async fn completing_twice_advances_the_instance_once() {
    let scratch = Scratch::new("tasks-twice");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let debit = poll_one(&server, "w1", "debit", json!({})).await;

    assert_eq!(complete(&server, &debit, json!({"n": 1})).await.0, 200);
    let again = complete(&server, &debit, json!({"n": 2})).await;

    assert_problem(&again, 409, "SUTRA.TASK.LOCK.LOST");
    assert_problem(
        &fail(&server, &debit, "LATE", false).await,
        409,
        "SUTRA.TASK.LOCK.LOST",
    );
    let advanced = server.wait_for_node(&instance, "credit").await;
    assert_eq!(advanced["vars"]["debit"], json!({"n": 1}));
    let history = server.history(&instance).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(count_kind(&history, "task_completed"), 1, "{history:?}");
}

#[tokio::test]
async fn failing_past_the_budget_goes_to_on_error_as_retries_exhausted() {
    let scratch = Scratch::new("tasks-exhausted");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;

    let first = poll_one(&server, "w1", "debit", json!({})).await;
    let (status, retried) = fail(&server, &first, "BANK.DOWN", true).await;
    assert_eq!(
        (status, retried),
        (200, json!({"id": first["id"], "state": "available"}))
    );
    // The long-poll sleeps until the backoff ends.
    let last = poll_one(&server, "w1", "debit", json!({})).await;
    assert_eq!(last["attempt"], 2);
    let (status, exhausted) = fail(&server, &last, "BANK.DOWN", true).await;
    assert_eq!((status, &exhausted["state"]), (200, &json!("terminal")));

    let rescued = server.wait_for_status(&instance, "completed").await;
    let error = &rescued["vars"]["error"];
    assert_eq!(error["code"], "SUTRA.TASK.RETRIES.EXHAUSTED", "{rescued}");
    assert_eq!(error["message"], "BANK.DOWN from the worker", "{rescued}");
    assert_audit_sequence_is_whole(&server.history(&instance).await);
}

#[tokio::test]
async fn exhausted_retries_without_on_error_fail_the_instance() {
    let scratch = Scratch::new("tasks-strict");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (status, body) = server
        .send("strict-requests", "strict-1", json!({"id": "s1"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let instance = body["instance"].as_str().unwrap().to_owned();

    let only = poll_one(&server, "w1", "strict", json!({})).await;
    let (status, answer) = fail(&server, &only, "BANK.DOWN", true).await;
    assert_eq!(
        (status, &answer["state"]),
        (200, &json!("terminal")),
        "{answer}"
    );

    let failed = server.wait_for_status(&instance, "failed").await;
    assert_eq!(failed["failure"]["code"], "SUTRA.TASK.RETRIES.EXHAUSTED");
}

#[tokio::test]
async fn a_business_error_goes_to_on_error_at_once() {
    let scratch = Scratch::new("tasks-business");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let debit = poll_one(&server, "w1", "debit", json!({})).await;

    let (status, answer) = fail(&server, &debit, "ACCOUNT.CLOSED", false).await;

    assert_eq!(
        (status, answer),
        (200, json!({"id": debit["id"], "state": "failed"}))
    );
    let rescued = server.wait_for_status(&instance, "completed").await;
    assert_eq!(rescued["vars"]["error"]["code"], "ACCOUNT.CLOSED");
    assert!(
        poll(&server, "w1", "debit", json!({})).await.is_empty(),
        "a business error is not retried"
    );
}

#[tokio::test]
async fn a_long_poll_returns_as_soon_as_a_task_is_armed() {
    let scratch = Scratch::new("tasks-long-poll");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let began = Instant::now();
    let quiet = poll(&server, "w1", "debit", json!({"wait": "PT0.2S"})).await;
    assert!(quiet.is_empty());
    assert!(began.elapsed() >= Duration::from_millis(200), "it waited");

    let began = Instant::now();
    let waiting = poll(&server, "w1", "debit", json!({"wait": LONG_WAIT}));
    let arming = async {
        // Let the poll find nothing and start waiting first.
        tokio::time::sleep(Duration::from_millis(300)).await;
        start_transfer(&server, "t1").await
    };
    let (tasks, instance) = tokio::join!(waiting, arming);

    assert!(
        began.elapsed() < PROMPTLY,
        "the poll took {:?} of its {LONG_WAIT}",
        began.elapsed()
    );
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert_eq!(tasks[0]["instance"], instance.as_str());
}

#[tokio::test]
async fn a_released_task_goes_to_a_waiting_worker_at_once_on_the_same_attempt() {
    let scratch = Scratch::new("tasks-released");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let held = poll_one(&server, "w1", "debit", json!({"lock": "PT10M"})).await;
    let forged = json!({"lock_token": "not-the-token"});
    assert_problem(
        &answer(&server, &held, "release", forged).await,
        409,
        "SUTRA.TASK.LOCK.LOST",
    );

    // Another worker already waits: the hand-back wakes it, long before the lock would lapse.
    let waiting = {
        let server = &server;
        async move { poll_one(server, "w2", "debit", json!({"lock": "PT5M"})).await }
    };
    let release = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let body = json!({"lock_token": held["lock_token"]});
        answer(&server, &held, "release", body).await
    };
    let began = Instant::now();
    let (taken, (status, released)) = tokio::join!(waiting, release);

    assert_eq!(status, 200, "{released}");
    assert_eq!(released, json!({"id": held["id"], "state": "available"}));
    assert!(began.elapsed() < PROMPTLY, "took {:?}", began.elapsed());
    assert_eq!((&taken["id"], &taken["attempt"]), (&held["id"], &json!(1)));
    assert_problem(
        &complete(&server, &held, json!({"by": "w1"})).await,
        409,
        "SUTRA.TASK.LOCK.LOST",
    );
    assert_eq!(complete(&server, &taken, json!({"by": "w2"})).await.0, 200);
    let advanced = server.wait_for_node(&instance, "credit").await;
    assert_eq!(advanced["vars"]["debit"], json!({"by": "w2"}));
}

#[tokio::test]
async fn a_batched_completion_answers_each_item_on_its_own() {
    let scratch = Scratch::new("tasks-batch");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let good = start_transfer(&server, "t1").await;
    let other = start_transfer(&server, "t2").await;
    let first = poll_one(&server, "w1", "debit", json!({})).await;
    let second = poll_one(&server, "w1", "debit", json!({})).await;
    let (completed, held) = if first["instance"] == good.as_str() {
        (first, second)
    } else {
        (second, first)
    };
    let mut forged = held.clone();
    forged["lock_token"] = json!("not-the-token");
    let unknown = json!({"id": format!("{good}:99"), "lock_token": completed["lock_token"]});

    let (status, answer) = complete_batch(
        &server,
        json!([
            item(&completed, json!({"debited": 10})),
            item(&forged, json!({})),
            item(&unknown, json!({})),
        ]),
    )
    .await;

    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().expect("an item per completion");
    assert_eq!(items.len(), 3, "{answer}");
    assert_eq!(
        items[0],
        json!({"id": completed["id"], "state": "completed"})
    );
    // Each refusal is the problem the same completion sent alone answers.
    let alone = complete(&server, &forged, json!({})).await;
    assert_problem(&alone, 409, "SUTRA.TASK.LOCK.LOST");
    assert_eq!(items[1], json!({"id": held["id"], "error": alone.1}));
    let alone = complete(&server, &unknown, json!({})).await;
    assert_problem(&alone, 404, "SUTRA.TASK.NOT_FOUND");
    assert_eq!(items[2], json!({"id": unknown["id"], "error": alone.1}));
    let advanced = server.wait_for_node(&good, "credit").await;
    assert_eq!(advanced["vars"]["debit"], json!({"debited": 10}));
    let history = server.history(&good).await;
    assert_eq!(count_kind(&history, "task_completed"), 1, "{history:?}");
    assert_untouched(&server, &held).await;

    // The refused item's task still takes its own token.
    let (status, answer) = complete_batch(&server, json!([item(&held, json!({"n": 1}))])).await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"items": [{"id": held["id"], "state": "completed"}]})
        )
    );
    server.wait_for_node(&other, "credit").await;
}

#[tokio::test]
async fn a_completion_that_asks_is_answered_with_the_next_task_its_step_armed() {
    let scratch = Scratch::new("tasks-take");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let debit = poll_one(&server, "w1", "debit", json!({})).await;
    let mut asking = item(&debit, json!({"debited": 10}));
    asking["take"] = json!({"worker": "w1", "topics": ["credit", "debit"], "lock": "PT5M"});

    let (status, answer) = complete_batch(&server, json!([asking])).await;

    assert_eq!(status, 200, "{answer}");
    let result = &answer["items"][0];
    assert_eq!(result["state"], "completed", "{answer}");
    let taken = &result["taken"];
    assert_eq!(
        (&taken["topic"], &taken["instance"], &taken["attempt"]),
        (&json!("credit"), &json!(instance), &json!(1)),
        "{answer}"
    );
    assert_eq!(taken["input"], json!({"account": "b-2"}));
    let (_, locked) = server.get("/v1/tasks?state=locked").await;
    let listed = &locked["items"][0];
    assert_eq!(
        (&listed["id"], &listed["worker"]),
        (&taken["id"], &json!("w1")),
        "{locked}"
    );
    assert!(
        poll(&server, "w2", "credit", json!({})).await.is_empty(),
        "no poll takes a task locked for the worker that asked"
    );
    let (status, done) = complete(&server, taken, json!({"credited": 10})).await;
    assert_eq!(
        (status, &done["state"]),
        (200, &json!("completed")),
        "{done}"
    );
    let ended = server.wait_for_status(&instance, "completed").await;
    assert_eq!(ended["vars"]["credit"], json!({"credited": 10}));
    assert_audit_sequence_is_whole(&server.history(&instance).await);
}

#[tokio::test]
async fn a_completion_asking_for_other_topics_leaves_the_next_task_to_the_polls() {
    let scratch = Scratch::new("tasks-take-other");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let debit = poll_one(&server, "w1", "debit", json!({})).await;
    let mut asking = item(&debit, json!({"debited": 10}));
    asking["take"] = json!({"worker": "w1", "topics": ["debit"]});

    let (status, answer) = complete_batch(&server, json!([asking])).await;

    assert_eq!(
        (status, &answer["items"][0]),
        (200, &json!({"id": debit["id"], "state": "completed"})),
        "{answer}"
    );
    let credit = poll_one(&server, "w2", "credit", json!({})).await;
    assert_eq!(credit["instance"], json!(instance));
}

#[tokio::test]
async fn a_malformed_batch_changes_nothing() {
    let scratch = Scratch::new("tasks-batch-malformed");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    start_transfer(&server, "t1").await;
    let task = poll_one(&server, "w1", "debit", json!({})).await;
    let good = item(&task, json!({"debited": 10}));
    let cases = [
        (good.clone(), "the body"),
        (json!(null), "the body"),
        (
            json!([good, {"id": task["id"], "output": {}}]),
            "`[1]`: missing field `lock_token`",
        ),
        (json!([good, {"id": 7, "lock_token": "t"}]), "`[1].id`"),
        (json!([good, "x"]), "`[1]`"),
        (
            json!([{"take": {"worker": "", "topics": ["credit"]}, "id": task["id"], "lock_token": task["lock_token"]}]),
            "`worker`",
        ),
        (
            json!([{"take": {"worker": "w1", "topics": []}, "id": task["id"], "lock_token": task["lock_token"]}]),
            "`topics`",
        ),
        (
            json!([{"take": {"worker": "w1", "topics": ["credit"], "lock": "PT0S"}, "id": task["id"], "lock_token": task["lock_token"]}]),
            "`take.lock`",
        ),
        // What PostgreSQL text cannot hold is refused before it reaches the store.
        (
            json!([item(&task, json!({"note": "a\u{0}b"}))]),
            "`/0/output/note`: contains the character \\u0000",
        ),
    ];
    for (body, detail) in cases {
        let refused = complete_batch(&server, body.clone()).await;
        assert_problem(&refused, 400, "SUTRA.API.REQUEST.INVALID");
        let said = refused.1["detail"].as_str().unwrap_or_default();
        assert!(said.contains(detail), "{body}: {said}");
    }
    let not_json = server
        .post_raw("/v1/tasks/complete", "[{oops".to_owned())
        .await;
    assert_problem(&not_json, 400, "SUTRA.API.REQUEST.INVALID");

    assert_untouched(&server, &task).await;
    let (status, answer) = complete_batch(&server, json!([good])).await;
    assert_eq!(
        answer["items"][0]["state"], "completed",
        "{status} {answer}"
    );
}

#[tokio::test]
async fn an_oversized_batch_is_refused() {
    let scratch = Scratch::new("tasks-batch-oversized");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let instance = start_transfer(&server, "t1").await;
    let task = poll_one(&server, "w1", "debit", json!({})).await;
    let unknown = |n: usize| json!({"id": format!("{instance}:{}", 100 + n), "lock_token": "t"});
    let mut batch = vec![item(&task, json!({"debited": 10}))];
    batch.extend((0..100).map(unknown));

    let refused = complete_batch(&server, json!(batch)).await;

    assert_problem(&refused, 400, "SUTRA.API.REQUEST.INVALID");
    let detail = refused.1["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("at most 100") && detail.contains("101"),
        "{detail}"
    );
    assert_untouched(&server, &task).await;

    // At the cap a batch is taken whole, and an empty one answers nothing.
    batch.pop();
    let (status, answer) = complete_batch(&server, json!(batch)).await;
    assert_eq!(status, 200, "{answer}");
    let items = answer["items"].as_array().expect("an item per completion");
    assert_eq!(items.len(), 100);
    assert_eq!(items[0], json!({"id": task["id"], "state": "completed"}));
    for (sent, answered) in batch.iter().zip(items).skip(1) {
        assert_eq!(answered["id"], sent["id"]);
        assert_eq!(
            answered["error"]["code"], "SUTRA.TASK.NOT_FOUND",
            "{answered}"
        );
    }
    assert_eq!(
        complete_batch(&server, json!([])).await,
        (200, json!({"items": []}))
    );
}

#[tokio::test]
async fn malformed_task_requests_are_refused_naming_the_field() {
    let scratch = Scratch::new("tasks-malformed");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let cases = [
        ("/v1/tasks/poll", json!({"topics": ["debit"]}), "worker"),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": "debit"}),
            "topics",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": []}),
            "topics",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w".repeat(201), "topics": ["debit"]}),
            "worker",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w\u{7}1", "topics": ["debit"]}),
            "worker",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": ["debit", "no such topic!"]}),
            "topics",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": vec!["debit"; 101]}),
            "topics",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": ["debit"], "max": 0}),
            "max",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": ["debit"], "lock": "5m"}),
            "lock",
        ),
        (
            "/v1/tasks/poll",
            json!({"worker": "w1", "topics": ["debit"], "wait": 20}),
            "wait",
        ),
        (
            "/v1/tasks/x:1/complete",
            json!({"output": {}}),
            "lock_token",
        ),
        (
            "/v1/tasks/x:1/fail",
            json!({"lock_token": "t", "error": {"message": "m"}}),
            "code",
        ),
        ("/v1/tasks/x:1/extend", json!({"lock_token": "t"}), "lock"),
        (
            "/v1/tasks/x:1/extend",
            json!({"lock_token": "t", "lock": "PT0S"}),
            "lock",
        ),
    ];
    for (path, body, field) in cases {
        let refused = server.post_json(path, &body).await;
        assert_problem(&refused, 400, "SUTRA.API.REQUEST.INVALID");
        let detail = refused.1["detail"].as_str().unwrap_or_default();
        assert!(detail.contains(field), "{path} {body}: {detail}");
    }
    let not_json = server.post_raw("/v1/tasks/poll", "{oops".to_owned()).await;
    assert_problem(&not_json, 400, "SUTRA.API.REQUEST.INVALID");
    let (status, body) = server.get("/v1/tasks?state=bogus").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("SUTRA.API.REQUEST.INVALID"))
    );
}

#[tokio::test]
async fn a_shutdown_answers_waiting_long_polls_instead_of_waiting_them_out() {
    let scratch = Scratch::new("tasks-shutdown");
    let mut server = serve!(scratch.database()).deployed(FLOWS).await;
    let (http, url) = (server.http.clone(), server.url("/v1/tasks/poll"));
    let body = json!({"worker": "w1", "topics": ["debit"], "wait": LONG_WAIT});
    let waiting = tokio::spawn(async move { http.post(url).json(&body).send().await });
    // Let the poll find nothing and start waiting first.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let began = Instant::now();
    let exit = server.stop();

    assert!(exit.success(), "{exit}");
    assert!(began.elapsed() < PROMPTLY, "took {:?}", began.elapsed());
    let response = waiting.await.unwrap().expect("the poll was answered");
    assert_eq!(response.status(), 200);
    assert_eq!(response.json::<Value>().await.unwrap(), json!([]));
}
