//! Crash test of `for-each` (issue 33): a loop of 200 items at concurrency 10 on two PostgreSQL
//! replicas, one of them SIGKILLed and restarted again and again while workers on both complete
//! the bodies' tasks. Every item's body completes exactly once, and the results come back in
//! item order: a kill between a completion and the step that consumes it loses nothing (the
//! completion's delivery is durable, SPEC §5.6), and a body whose worker never heard back is
//! offered again when its lock lapses, its late second answer refused. Each at one lane and at
//! four (`<test>::lanes_1`, `<test>::lanes_4`).

mod common;

use std::time::{Duration, Instant};

use common::{Fleet, Timing};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sutra_client::{Client, Task, Worker};
use sutra_testkit::postgres::TestDatabase;
use tokio::sync::oneshot;

const ITEMS: u64 = 200;
const KILLS: usize = 6;
/// How long a worker takes over an item.
const WORK: Duration = Duration::from_millis(100);

const FAN_OUT: &str = r#"
name: fan-out
channels:
  batches: { transport: http, correlate: data.id }
flows:
  batch:
    start: { channel: batches }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          concurrency: 10
          task: { topic: item, input: "= item", retries: 50, backoff: PT0.1S }
        output: results
"#;

#[derive(Serialize, Deserialize)]
struct Item {
    n: u64,
}

/// A worker on replica `url`, answering each item with its own number.
fn worker(
    url: &str,
    id: &str,
    timing: Timing,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let client = Client::new(url).expect("a replica's URL");
    let worker = Worker::new(client, id)
        .handler("item", |task: Task<Item>| async move {
            // Work that takes a while, so that the loop spans the kills.
            tokio::time::sleep(WORK).await;
            Ok(json!({"n": task.input.n}))
        })
        .lock(timing.task_lock)
        .poll_wait(Duration::from_secs(1));
    let (stop, stopped) = oneshot::channel();
    let done = tokio::spawn(worker.run(async {
        let _ = stopped.await;
    }));
    (stop, done)
}

/// At one engine lane and at four (the windows between lanes — group commit, the hand-off of
/// a completion's next task — exist only at several). Written out rather than through
/// `at_lanes_1_and_4!`: restarting a replica blocks in place, which needs the multi-threaded
/// runtime.
mod every_item_of_a_fan_out_completes_exactly_once_while_replicas_are_killed {
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn lanes_1() {
        super::every_item_completes_exactly_once(1).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn lanes_4() {
        super::every_item_completes_exactly_once(4).await
    }
}

async fn every_item_completes_exactly_once(lanes: usize) {
    let database = TestDatabase::create().await;
    let timing = Timing::SHORT;
    let mut fleet = Fleet::of("crash-fan-out", 2, timing)
        .lanes(lanes)
        .start(database.url(), FAN_OUT)
        .await;
    let items: Vec<Value> = (0..ITEMS).map(|n| json!({"n": n})).collect();
    let (status, started) = fleet
        .replica(0)
        .send(
            "batches",
            "batch-1",
            json!({"id": "batch-1", "items": items}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    let instance = started["instance"]
        .as_str()
        .expect("an instance")
        .to_owned();
    let workers: Vec<_> = fleet
        .urls()
        .iter()
        .enumerate()
        .map(|(n, url)| worker(url, &format!("fan-out-{n}"), timing))
        .collect();

    // Replica 1 is the victim: replica 0 stays up to be asked, and leads or takes over.
    for _ in 0..KILLS {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        fleet.kill(1);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let deadline = Instant::now() + timing.recovery_bound();
        while let Err(why) = fleet.restart(1) {
            assert!(
                Instant::now() < deadline,
                "replica 1 does not come back: {why}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    let done = fleet
        .replica(0)
        .wait_for_status(&instance, "completed")
        .await;
    let expected: Vec<Value> = (0..ITEMS).map(|n| json!({"n": n})).collect();
    assert_eq!(
        done["vars"]["results"],
        json!(expected),
        "every item's result, in item order"
    );
    let history = fleet.replica(0).history(&instance).await;
    let completed = history
        .iter()
        .filter(|e| e["kind"] == "task_completed")
        .count();
    assert_eq!(
        completed, ITEMS as usize,
        "each item's body completed exactly once"
    );
    sutra_testkit::assert_audit_sequence_is_whole(&history);
    for (stop, done) in workers {
        let _ = stop.send(());
        let _ = tokio::time::timeout(sutra_testkit::PATIENCE, done).await;
    }
    assert_eq!(fleet.killed().len(), KILLS);
}
