//! Active-active replicas (SPEC §6): `sutra serve` processes on one PostgreSQL database, each a
//! peer of the others, with transfers sent round-robin to all of them and a worker polling each.
//!
//! The invariant: every instance completes exactly once, whichever replicas its steps ran on.
//! One instance per event id (an event resent to another replica is answered as a duplicate
//! naming the same instance), a whole audit sequence per instance, each task completion in the
//! history once, each outbox message received by the ledger — and nothing left claimed, asked
//! or unsent in the database.
//!
//! Each test also prints the fleet's throughput on the same workload, for 1 and for 3 replicas
//! (`cargo test -p sutra-cli --test replicas -- --nocapture`). Nothing asserts on speed: a slow
//! machine makes these tests slower, never red.

mod common;

use std::time::{Duration, Instant};

use common::{
    Accepted, Fleet, Timing, Workers, assert_every_role_led_by_one_live_replica,
    assert_nothing_stranded, assert_resends_are_duplicates, audit, send_transfer, transfers,
    wait_for_ledger,
};
use sutra_testkit::Receiver;
use sutra_testkit::postgres::TestDatabase;

/// The workload: this many transfers, sent by this many concurrent senders.
const TRANSFERS: usize = 200;
const SENDERS: usize = 16;
/// How long the whole workload may take before the test fails: far above a healthy run.
const COMPLETION_PATIENCE: Duration = Duration::from_secs(180);

/// The two measurements must not share the machine's cores with each other.
static MEASURING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_replica_completes_every_instance_exactly_once() {
    run_workload(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_complete_every_instance_exactly_once() {
    run_workload(3).await;
}

/// A poll that took fewer tasks than it asked for lets the next poll of its topics on that
/// replica wait without looking (decision 0037), until this replica arms a task or the backstop
/// runs out. A task armed on another replica cannot wake it: it must still be found, within the
/// backstop, not at the end of the poll's wait. (One replica alone would never show this: every
/// arm there wakes the poll.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_armed_on_another_replica_reaches_a_poll_that_just_came_back_short() {
    let _alone = MEASURING.lock().await;
    let database = TestDatabase::create().await;
    let receiver = Receiver::accepting();
    let deployment = transfers(&receiver.url("/ledger"));
    let fleet = Fleet::of("short-look", 2, Timing::SHORT)
        .start(database.url(), &deployment)
        .await;
    let urls = fleet.urls();
    let http = reqwest::Client::new();
    let poll = |wait: &str| {
        let body = serde_json::json!({
            "worker": "w", "topics": ["debit-account"], "max": 10, "wait": wait,
        });
        let request = http.post(format!("{}/v1/tasks/poll", urls[1])).json(&body);
        async move {
            let response = request.send().await.expect("the poll is answered");
            assert_eq!(response.status().as_u16(), 200);
            let tasks: Vec<serde_json::Value> = response.json().await.expect("an array");
            tasks
        }
    };

    send_transfer(&http, &urls, 0, "first").await;
    let short = poll("PT0S").await;
    assert_eq!(
        short.len(),
        1,
        "the first transfer's task, fewer than asked for"
    );

    // Armed on replica 0 just after replica 1's short look: replica 1 hears nothing of it, so
    // its next poll starts quiet, whichever of the two comes first.
    send_transfer(&http, &urls[..1], 0, "second").await;
    let began = Instant::now();
    let found = poll("PT60S").await;

    assert_eq!(found.len(), 1, "the second transfer's task: {found:?}");
    assert!(
        began.elapsed() < Duration::from_secs(30),
        "found after {:?}: by the end of the wait, not by the backstop",
        began.elapsed()
    );
}

/// Runs [`TRANSFERS`] transfers through a fleet of `replicas`, prints its throughput and checks
/// every invariant.
async fn run_workload(replicas: usize) {
    let _alone = MEASURING.lock().await;
    let timing = Timing::SHORT;
    let database = TestDatabase::create().await;
    let receiver = Receiver::accepting();
    let deployment = transfers(&receiver.url("/ledger"));
    let fleet = Fleet::of("replicas", replicas, timing)
        .start(database.url(), &deployment)
        .await;
    let urls = fleet.urls();
    let workers = Workers::start(&urls, timing);
    let http = reqwest::Client::new();

    let started = Instant::now();
    let accepted = send_round_robin(&http, &urls).await;
    let elapsed = wait_for_ledger(
        &receiver,
        TRANSFERS,
        started,
        COMPLETION_PATIENCE,
        fleet.replica(0),
    )
    .await;
    let handler_runs = workers.handler_runs();
    workers.stop().await;
    println!(
        "throughput: {replicas} replica(s) on PostgreSQL, {TRANSFERS} transfers \
         (start → task → task → emit → end): {:.2} s, {:.1} instances/s",
        elapsed.as_secs_f64(),
        TRANSFERS as f64 / elapsed.as_secs_f64()
    );

    let found = audit(fleet.replica(0), &accepted, &receiver).await;
    assert_resends_are_duplicates(&http, &urls, &accepted).await;
    assert_nothing_stranded(database.admin_url()).await;
    let leases =
        assert_every_role_led_by_one_live_replica(&fleet, Instant::now(), timing.lease_bound())
            .await;
    println!(
        "replicas: {replicas} replica(s): every instance completed exactly once; handler runs \
         {handler_runs} for {} tasks; ledger duplicates {}; leases {}",
        2 * TRANSFERS,
        found.ledger_duplicates,
        leases
    );
}

/// Sends every transfer, transfer `n` first to replica `n mod replicas`, from [`SENDERS`]
/// concurrent senders; returns how each was accepted.
async fn send_round_robin(http: &reqwest::Client, urls: &[String]) -> Vec<Accepted> {
    let senders: Vec<_> = (0..SENDERS)
        .map(|sender| {
            let (http, urls) = (http.clone(), urls.to_vec());
            tokio::spawn(async move {
                let mut accepted = Vec::new();
                for n in (sender..TRANSFERS).step_by(SENDERS) {
                    accepted
                        .push(send_transfer(&http, &urls, n % urls.len(), &format!("t{n}")).await);
                }
                accepted
            })
        })
        .collect();
    let mut accepted = Vec::new();
    for sender in senders {
        accepted.extend(sender.await.expect("a sender does not panic"));
    }
    accepted
}
