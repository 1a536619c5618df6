//! The worker library against a real `sutra serve`: typed handlers drive flows through their
//! task nodes, business errors reach `on-error`, failures and panics are retried, locks are kept
//! while a handler runs, and a stopping worker hands its unfinished task to another at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sutra_client::{Client, Task, TaskError, TaskQuery, Worker, codes};
use sutra_testkit::{PATIENCE, Scratch, Server, count_kind, serve, until};
use tokio::sync::{Notify, Semaphore, oneshot};
use tokio::task::JoinHandle;

const BANK: &str = r#"
name: bank
channels:
  transfers:
    transport: http
    correlate: data.id
  audits:
    transport: http
    correlate: data.id
flows:
  transfer:
    start: { channel: transfers }
    nodes:
      - id: debit
        task: { topic: debit-account, input: { account: "= vars.input.from", amount: "= vars.input.amount" }, backoff: PT0.1S }
        output: debit
        on-error: rejected
      - id: credit
        task: { topic: credit-account, input: { account: "= vars.input.to", amount: "= vars.input.amount" }, backoff: PT0.1S }
        output: credit
      - id: done
        end: {}
      - id: rejected
        set: { outcome: rejected }
  audit:
    start: { channel: audits }
    nodes:
      - id: review
        task: { topic: review-books, input: { id: "= vars.input.id" }, lock: PT2S, backoff: PT0.1S }
        output: review
"#;

/// What the ledger handlers read from a task's input.
#[derive(Debug, Deserialize)]
struct Posting {
    account: String,
    amount: u64,
}

/// What they give back, as the task's output.
#[derive(Debug, Serialize)]
struct Posted {
    account: String,
    amount: u64,
    attempt: u32,
}

/// Every account holds this much; a larger debit is a business error.
const BALANCE: u64 = 1_000;

fn client(server: &Server) -> Client {
    Client::new(&server.url("")).expect("the server's URL")
}

async fn transfer(server: &Server, id: &str, amount: Value) -> String {
    let data = json!({"id": id, "from": "alice", "to": "bob", "amount": amount});
    let (status, body) = server.send("transfers", &format!("evt-{id}"), data).await;
    assert_eq!(status, 202, "{body}");
    body["instance"]
        .as_str()
        .expect("an instance id")
        .to_owned()
}

fn post(task: &Task<Posting>) -> Posted {
    Posted {
        account: task.input.account.clone(),
        amount: task.input.amount,
        attempt: task.attempt,
    }
}

/// A worker with both ledger handlers; debits above the balance are refused.
fn ledger(server: &Server, id: &str) -> Worker {
    Worker::new(client(server), id)
        .handler("debit-account", |task: Task<Posting>| async move {
            if task.input.amount > BALANCE {
                return Err(TaskError::business(
                    "FUNDS.INSUFFICIENT",
                    format!("{} cannot pay {}", task.input.account, task.input.amount),
                ));
            }
            Ok(post(&task))
        })
        .handler("credit-account", |task: Task<Posting>| async move {
            Ok(post(&task))
        })
        .poll_wait(Duration::from_secs(2))
}

/// A worker running in the background until stopped.
struct Running {
    stop: oneshot::Sender<()>,
    done: JoinHandle<()>,
}

fn start(worker: Worker) -> Running {
    let (stop, stopped) = oneshot::channel();
    let done = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    Running { stop, done }
}

impl Running {
    async fn stop(self) {
        let _ = self.stop.send(());
        tokio::time::timeout(PATIENCE, self.done)
            .await
            .expect("the worker stops when asked")
            .expect("the worker does not panic");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_drives_a_flow_with_two_tasks_to_completion() {
    let scratch = Scratch::new("worker-two-tasks");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let worker = start(ledger(&server, "ledger-1"));

    let id = transfer(&server, "t1", json!(250)).await;
    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(
        instance["vars"]["debit"],
        json!({"account": "alice", "amount": 250, "attempt": 1})
    );
    assert_eq!(
        instance["vars"]["credit"],
        json!({"account": "bob", "amount": 250, "attempt": 1})
    );
    let history = server.history(&id).await;
    let completions = count_kind(&history, "task_completed");
    assert_eq!(completions, 2, "{history:?}");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_business_error_takes_the_on_error_path_without_a_retry() {
    let scratch = Scratch::new("worker-business-error");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let worker = start(ledger(&server, "ledger-1"));

    let id = transfer(&server, "t2", json!(5_000)).await;
    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["outcome"], "rejected");
    assert_eq!(instance["vars"]["error"]["code"], "FUNDS.INSUFFICIENT");
    assert_eq!(
        instance["vars"]["error"]["message"],
        "alice cannot pay 5000"
    );
    assert!(instance["vars"].get("credit").is_none(), "{instance}");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_that_does_not_fit_the_handler_is_refused_as_a_business_error() {
    let scratch = Scratch::new("worker-bad-input");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let worker = start(ledger(&server, "ledger-1"));

    let id = transfer(&server, "t3", json!("a lot")).await;
    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["outcome"], "rejected");
    assert_eq!(instance["vars"]["error"]["code"], codes::INPUT_INVALID);
    let debit = task_state(&server, &id, "debit-account").await;
    assert_eq!(debit, "failed", "garbage is not retried");
    worker.stop().await;
}

/// The state of the instance's task of `topic`, as the task list reports it.
async fn task_state(server: &Server, instance: &str, topic: &str) -> String {
    let query = TaskQuery {
        topic: Some(topic.to_owned()),
        ..TaskQuery::default()
    };
    let page = client(server).tasks(&query).await.expect("the task list");
    page.items
        .iter()
        .find(|task| task.instance == instance)
        .unwrap_or_else(|| panic!("no {topic} task for {instance}: {page:?}"))
        .state
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_and_panicking_handlers_hand_their_tasks_back_for_a_retry() {
    let scratch = Scratch::new("worker-panic");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let worker = start(
        Worker::new(client(&server), "flaky-1")
            .handler("debit-account", |task: Task<Posting>| async move {
                assert!(task.attempt > 1, "the first attempt blows up");
                Ok(post(&task))
            })
            .handler("credit-account", |task: Task<Posting>| async move {
                if task.attempt == 1 {
                    return Err(TaskError::retry("the ledger timed out"));
                }
                Ok(post(&task))
            })
            .poll_wait(Duration::from_secs(2)),
    );

    let id = transfer(&server, "t4", json!(10)).await;
    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["debit"]["attempt"], 2, "{instance}");
    assert_eq!(instance["vars"]["credit"]["attempt"], 2, "{instance}");
    worker.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_locks_no_more_tasks_than_it_has_free_slots() {
    let scratch = Scratch::new("worker-slots");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let gate = Arc::new(Semaphore::new(0));
    let started = Arc::new(AtomicU32::new(0));
    let (gate_in, started_in) = (Arc::clone(&gate), Arc::clone(&started));
    let worker = start(
        Worker::new(client(&server), "narrow-1")
            .handler("debit-account", move |task: Task<Posting>| {
                let (gate, started) = (Arc::clone(&gate_in), Arc::clone(&started_in));
                async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    let _pass = gate.acquire().await.expect("the gate stays open");
                    Ok(post(&task))
                }
            })
            .handler("credit-account", |task: Task<Posting>| async move {
                Ok(post(&task))
            })
            .concurrency(2)
            .poll_wait(Duration::from_secs(2)),
    );

    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(transfer(&server, &format!("t5-{n}"), json!(1)).await);
    }
    until("two handlers run", async || {
        started.load(Ordering::SeqCst) == 2
    })
    .await;
    let states = task_states(&server, "debit-account").await;
    assert_eq!(
        (count(&states, "locked"), count(&states, "available")),
        (2, 1),
        "the third task stays available for other workers: {states:?}"
    );

    gate.add_permits(3);
    for id in &ids {
        server.wait_for_status(id, "completed").await;
    }
    worker.stop().await;
}

async fn task_states(server: &Server, topic: &str) -> Vec<String> {
    let query = TaskQuery {
        topic: Some(topic.to_owned()),
        ..TaskQuery::default()
    };
    let page = client(server).tasks(&query).await.expect("the task list");
    page.items.into_iter().map(|task| task.state).collect()
}

fn count(states: &[String], state: &str) -> usize {
    states.iter().filter(|s| *s == state).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_handler_keeps_its_lock_so_no_other_worker_runs_the_task() {
    let scratch = Scratch::new("worker-extend");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let runs = Arc::new(AtomicU32::new(0));
    let reviewer = |name: &str| {
        let runs = Arc::clone(&runs);
        Worker::new(client(&server), name)
            .handler("review-books", move |_: Task<Value>| {
                let runs = Arc::clone(&runs);
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    // Over two lock periods: without extensions the task would be taken again.
                    tokio::time::sleep(Duration::from_secs(5)).await;
                    Ok(json!({"clean": true}))
                }
            })
            .lock(Duration::from_secs(2))
            .poll_wait(Duration::from_millis(500))
    };
    let first = start(reviewer("reviewer-1"));
    let (status, body) = server.send("audits", "evt-a1", json!({"id": "a1"})).await;
    assert_eq!(status, 202, "{body}");
    let id = body["instance"].as_str().unwrap().to_owned();
    until("the first reviewer starts", async || {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    let second = start(reviewer("reviewer-2"));

    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["review"], json!({"clean": true}));
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the task ran twice");
    first.stop().await;
    second.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_hands_its_unfinished_task_to_another_at_once() {
    let scratch = Scratch::new("worker-shutdown");
    let server = serve!(scratch.database()).deployed(BANK).await;
    let started = Arc::new(Notify::new());
    let signal = Arc::clone(&started);
    // A lock far longer than the test's patience: only a hand-back can free the task in time.
    let stuck = Worker::new(client(&server), "stuck-1")
        .handler("debit-account", move |_: Task<Posting>| {
            let signal = Arc::clone(&signal);
            async move {
                signal.notify_one();
                std::future::pending::<()>().await;
                Ok(json!({}))
            }
        })
        .lock(Duration::from_secs(600))
        .grace(Duration::from_millis(200))
        .poll_wait(Duration::from_secs(2));
    let stuck = start(stuck);

    let id = transfer(&server, "t6", json!(40)).await;
    tokio::time::timeout(PATIENCE, started.notified())
        .await
        .expect("the stuck worker takes the task");
    stuck.stop().await;

    let healthy = start(ledger(&server, "ledger-2"));
    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["debit"]["amount"], 40, "{instance}");
    assert_eq!(
        instance["vars"]["debit"]["attempt"], 1,
        "handed back with its attempt unspent: {instance}"
    );
    healthy.stop().await;
}
