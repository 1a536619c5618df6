//! What the engine does about time, on a manual clock: each wait ends once the clock passes its
//! deadline, and not a moment before. Nothing here sleeps out a timer: a test moves the clock
//! on, and real time only gives the engine the moment it needs to act.

mod common;

use std::time::Duration;

use jiff::SignedDuration;
use serde_json::json;
use sutra_core::snapshot::Status;
use sutra_core::step::TaskError;
use sutra_engine::tasks::PollRequest;
use sutra_engine::{EngineConfig, Error};
use sutra_store::{Owner, TaskFailure, TaskPoll, TaskState};

use common::{GRACE, Harness, TENANT};

const MILLI: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);
const CLAIM_TIMEOUT: Duration = Duration::from_secs(300);
const SWEEP_INTERVAL: Duration = Duration::from_secs(60);
const OUTBOX_BACKOFF: Duration = Duration::from_secs(10);
const OUTBOX_POLL: Duration = Duration::from_secs(1);
/// Shorter than a long-poll's longest wait.
const LOCK: SignedDuration = SignedDuration::from_secs(30);

const FLOWS: &str = r#"
name: timing
channels:
  orders: { transport: http, correlate: data.id }
  payments: { transport: http, correlate: data.order }
  transfers: { transport: http, correlate: data.id }
  notices: { transport: http, correlate: data.id }
  ledger: { transport: http, url: "http://127.0.0.1:9/ledger" }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: pay
        receive: { channel: payments, key: vars.input.id, timeout: PT1H, on-timeout: expired }
        output: payment
      - id: done
        end: {}
      - id: expired
        fail: { code: ORDER.EXPIRED, detail: "= 'no payment for ' + vars.input.id" }
  transfer:
    start: { channel: transfers }
    nodes:
      - id: debit
        task: { topic: debit, input: { account: "= vars.input.from" }, retries: 1, backoff: PT10S }
        output: debit
        on-error: rescue
      - id: credit
        task: { topic: credit, input: { account: "= vars.input.to" } }
        output: credit
      - id: done
        end: {}
      - id: rescue
        end: {}
  notice:
    start: { channel: notices }
    nodes:
      - id: notify
        emit: { channel: ledger, data: { notice: "= vars.input.id" } }
      - id: done
        end: {}
"#;

fn config() -> EngineConfig {
    EngineConfig {
        claim_timeout: SignedDuration::try_from(CLAIM_TIMEOUT).unwrap(),
        sweep_interval: SignedDuration::try_from(SWEEP_INTERVAL).unwrap(),
        outbox_backoff: SignedDuration::try_from(OUTBOX_BACKOFF).unwrap(),
        outbox_poll: SignedDuration::try_from(OUTBOX_POLL).unwrap(),
        ..EngineConfig::default()
    }
}

async fn started() -> Harness {
    Harness::start(FLOWS, config()).await
}

fn minutes(n: i64) -> SignedDuration {
    SignedDuration::from_mins(n)
}

async fn fail(harness: &Harness, task: &sutra_store::LockedTask) -> TaskState {
    let failure = TaskFailure {
        error: TaskError {
            code: "BANK.DOWN".to_owned(),
            message: "from the worker".to_owned(),
        },
        retry: true,
    };
    harness
        .engine
        .fail_task(TENANT, &task.id, &task.lock_token, &failure)
        .await
        .expect("the failure is recorded")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_timeout_fires_once_the_clock_passes_it_and_not_before() {
    let harness = started().await;
    let id = harness.send("orders", "o1", json!({"id": "o1"})).await;
    harness.wait_for_status(&id, Status::Suspended).await;

    harness.advance(HOUR - MILLI);
    tokio::time::sleep(GRACE).await;
    let waiting = harness.instance(&id).await;
    assert_eq!(waiting.snapshot.status, Status::Suspended, "a moment early");

    harness.advance(MILLI);
    let expired = harness
        .nudging(harness.wait_for_status(&id, Status::Failed))
        .await;
    let failure = expired.snapshot.failure.expect("a failure");
    assert_eq!(failure.code, "ORDER.EXPIRED");
    assert_eq!(failure.detail, "no payment for o1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_task_is_offered_again_only_after_its_backoff() {
    let harness = started().await;
    harness
        .send(
            "transfers",
            "t1",
            json!({"id": "t1", "from": "a", "to": "b"}),
        )
        .await;
    let first = harness.poll_one("w1", "debit", minutes(1)).await;
    assert_eq!(fail(&harness, &first).await, TaskState::Available);

    assert!(harness.poll_now("w1", "debit", minutes(1)).await.is_empty());
    harness.advance(Duration::from_secs(10) - MILLI);
    assert!(
        harness.poll_now("w1", "debit", minutes(1)).await.is_empty(),
        "a moment before the backoff ends"
    );
    harness.advance(MILLI);
    let second = harness.poll_now("w1", "debit", minutes(1)).await;
    assert_eq!(second.len(), 1, "offered again once the backoff ended");
    assert_eq!((&second[0].id, second[0].attempt), (&first.id, 2));
}

/// Moved from `crates/sutra-cli/tests/tasks_http.rs`, where it waited out a real lock: a lapsed
/// lock hands the task to the next poll — a long-poll waiting while the lock holds wakes when it
/// lapses — and the first worker's token no longer holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_lock_makes_the_task_available_to_another_worker() {
    let harness = started().await;
    let instance = harness
        .send(
            "transfers",
            "t1",
            json!({"id": "t1", "from": "a", "to": "b"}),
        )
        .await;
    let lost = harness.poll_one("w1", "debit", LOCK).await;

    // Polled while the lock still holds: the long-poll wakes when it expires.
    let engine = std::sync::Arc::clone(&harness.engine);
    let waiting = tokio::spawn(async move {
        let request = PollRequest {
            poll: TaskPoll {
                tenant: TENANT.to_owned(),
                worker: "w2".to_owned(),
                topics: vec!["debit".to_owned()],
                max: 1,
                lock: Some(minutes(5)),
            },
            wait: sutra_engine::tasks::MAX_WAIT,
        };
        engine.poll_tasks(request).await
    });
    harness.advance(LOCK.unsigned_abs() - MILLI);
    tokio::time::sleep(GRACE).await;
    assert!(!waiting.is_finished(), "a moment before the lock lapses");
    // A waiting poll looks again no sooner than 10 ms after its last look.
    harness.advance(10 * MILLI);
    let taken = harness.nudging(waiting).await.unwrap();
    let taken = taken.expect("the poll is answered");
    let [taken] = <[_; 1]>::try_from(taken).expect("one task");

    assert_eq!((&taken.id, taken.attempt), (&lost.id, 2));
    assert_ne!(taken.lock_token, lost.lock_token);
    let refused = harness
        .engine
        .complete_task(
            TENANT,
            &lost.id,
            &lost.lock_token,
            &json!({"by": "w1"}),
            None,
        )
        .await;
    assert!(matches!(refused, Err(Error::LockLost(_))), "{refused:?}");
    harness
        .engine
        .complete_task(
            TENANT,
            &taken.id,
            &taken.lock_token,
            &json!({"by": "w2"}),
            None,
        )
        .await
        .expect("the live lock completes");
    let advanced = common::eventually("the instance at credit", || async {
        let record = harness.instance(&instance).await;
        let at_credit = record.snapshot.tokens.iter().any(|t| t.node == "credit");
        at_credit.then_some(record)
    })
    .await;
    assert_eq!(advanced.snapshot.vars["debit"], json!({"by": "w2"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_clears_a_stuck_claim_once_it_is_older_than_the_claim_timeout() {
    let harness = started().await;
    let id = harness.send("orders", "o1", json!({"id": "o1"})).await;
    harness.wait_for_status(&id, Status::Suspended).await;
    // A claim whose holder died: nobody will release it.
    let dead = Owner("dead/lane-0".to_owned());
    let store = harness.engine.store();
    store
        .claim(TENANT, &id, &dead, minutes(5))
        .await
        .expect("the claim is free");

    harness.advance(CLAIM_TIMEOUT - MILLI);
    tokio::time::sleep(GRACE).await;
    let held = harness.instance(&id).await;
    assert_eq!(held.owner.as_deref(), Some("dead/lane-0"), "not stale yet");

    // The sweep looks every interval: the first look after the claim went stale clears it.
    harness.advance(SWEEP_INTERVAL);
    let swept = common::eventually("the claim swept", || async {
        harness.instance(&id).await.owner.is_none().then_some(())
    });
    harness.nudging(swept).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_send_is_tried_again_only_after_its_backoff() {
    let harness = started().await;
    harness.sender.fail_next(1);
    let id = harness.send("notices", "n1", json!({"id": "n1"})).await;
    harness.wait_for_status(&id, Status::Completed).await;
    // Its failure recorded: the next try is due a backoff after it.
    common::eventually("the first send's failure", || async {
        let rows = harness.engine.store().outbox(TENANT, &id).await.unwrap();
        (rows[0].attempts == 1).then_some(())
    })
    .await;
    // The worker goes back to sleep on the clock before it moves.
    tokio::time::sleep(GRACE).await;

    harness.advance(OUTBOX_BACKOFF - MILLI);
    tokio::time::sleep(GRACE).await;
    assert_eq!(
        harness.sender.sends().len(),
        1,
        "a moment before the backoff ends"
    );

    // A pass that finds nothing due sleeps a whole poll: the worker knows of a retry only from
    // the pass that scheduled it.
    harness.advance(MILLI + OUTBOX_POLL);
    let sent_again = common::eventually("the send tried again", || async {
        let sends = harness.sender.sends();
        (sends.len() == 2).then_some(sends)
    });
    let sends = harness.nudging(sent_again).await;
    let backoff = SignedDuration::try_from(OUTBOX_BACKOFF).unwrap();
    assert!(sends[1].duration_since(sends[0]) >= backoff, "{sends:?}");
    let rows = harness.engine.store().outbox(TENANT, &id).await.unwrap();
    assert!(rows[0].sent_at.is_some(), "{rows:?}");
}

/// A flow whose task reminds its approver every `every`.
fn reminding(every: &str) -> String {
    format!(
        "name: reminders\nflows:\n  approve:\n    start: {{ channel: approvals }}\n    nodes:\n      \
         - id: ask\n        task: {{ topic: approve }}\n        remind:\n          after: PT1H\n          \
         every: {every}\n          nodes:\n            - id: nudge\n              set: {{ nudged: true }}\n      \
         - id: done\n        end: {{}}\nchannels:\n  approvals: {{ transport: http }}\n"
    )
}

/// A reminder repeating more often than the engine's floor (`sutra.remind.min-every`, issue 48:
/// one instance reminding every millisecond wrote ~670 history rows a second) is refused at
/// deploy, naming its node and the key; at the floor it deploys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reminder_more_frequent_than_the_engines_floor_is_refused_at_deploy() {
    let floor = EngineConfig {
        remind_min_every: minutes(1),
        ..config()
    };
    let harness = Harness::start(FLOWS, floor).await;
    let refused = harness
        .engine
        .deploy(TENANT, &reminding("PT30S"))
        .await
        .expect_err("PT30S is below the PT1M floor");
    let sutra_engine::DeployError::Invalid(diagnostics) = refused else {
        panic!("refused as invalid, not {refused:?}");
    };
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].rule, "remind-too-frequent");
    assert!(
        diagnostics[0].message.contains("node `ask`") && diagnostics[0].message.contains("PT30S"),
        "{}",
        diagnostics[0].message
    );
    assert!(
        (diagnostics[0].hint.as_deref()).is_some_and(|h| h.contains("sutra.remind.min-every")),
        "{diagnostics:?}"
    );
    harness
        .engine
        .deploy(TENANT, &reminding("PT1M"))
        .await
        .expect("a reminder at the floor deploys");
}
