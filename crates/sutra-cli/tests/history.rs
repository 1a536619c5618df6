//! The history checker catches what it claims to (issue 17, decision 0043): short runs of two
//! replicas, each with an invariant broken on purpose by a test-only switch, and the checker
//! reports the anomaly; the same runs without the switch, and it reports none.
//!
//! - `SUTRA_TEST_SKIP_FENCE=1` (sutra-store-postgres): a step's commit does not check the fence
//!   its claim read, and the claim does not lock its row. Two messages for one waiting instance,
//!   sent at once to both replicas, are then both consumed from the one snapshot they read: two
//!   commits under one fence. (A SIGSTOP past the claim timeout, the brief's first idea, cannot
//!   show it: since decision 0024 a lane's claim is its transaction's row lock, which no timeout
//!   lapses while the transaction lives — PostgreSQL ends a frozen holder's session instead.)
//! - `SUTRA_TEST_ACK_BEFORE_COMMIT=1` (sutra-engine): a lane answers each member of a group
//!   before the group commits.
//! - `SUTRA_TEST_STEAL_LOCKS=1` (sutra-store-postgres): a poll takes a task another worker holds
//!   a live lock on.
//!
//! The other rules over tasks, asked rows and the outbox have no broken build of their own: each
//! is shown on a short history written by hand that breaks it, and on the clean runs above.

mod common;

use std::time::Duration;

use common::history::{
    self, ANSWERED_AND_UNHEARD, ANSWERED_BEFORE_COMMIT, ASKED_NOT_RESOLVED, CHILD_NEVER_RAN,
    COMPENSATED_TWICE, COMPLETION_NOT_CONSUMED, CONSUMED_TWICE, ENDED_TWICE, Incarnation,
    LOCKED_AFTER_COMPLETION, LOCKED_TWICE, OUTBOX_NOT_SENT, OUTBOX_UNKNOWN, PARK_ANSWERED_TWICE,
    REPORTED_TWICE, TWO_COMMITS_UNDER_ONE_FENCE, UNCALLED_CHILD,
};
use common::{
    Accepted, Fleet, Timing, Workers, distinct, heard, send_transfer, transfers, wait_for_ledger,
};
use serde_json::json;
use sutra_testkit::Receiver;
use sutra_testkit::postgres::DedicatedCluster;

/// No schedule is drawn in these runs: the seed only labels the report.
const SEED: u64 = 17;

/// Instances opened, each then sent two racing messages.
const RACES: usize = 30;

/// A flow that waits for one message on `bumps` and ends.
const RACE: &str = r#"
name: race
channels:
  opened:
    transport: http
    correlate: data.id
  bumps:
    transport: http
    correlate: data.id
flows:
  tally:
    start: { channel: opened }
    nodes:
      - id: bumped
        receive: { channel: bumps, key: vars.input.id }
      - id: done
        end: {}
"#;

/// Opens [`RACES`] instances on two replicas, and sends each two messages for its one wait at
/// once, one to each replica; returns the history check.
async fn race_two_messages_per_wait(switches: &[&str]) -> history::Report {
    let cluster = DedicatedCluster::start().await;
    let fleet = (Fleet::of("race", 2, Timing::SHORT).switches(switches))
        .start(cluster.url(), RACE)
        .await;
    let urls = fleet.urls();
    let mut accepted = Vec::new();
    let mut answered = 0;
    for n in 0..RACES {
        let id = format!("r{n}");
        let (status, body) = fleet
            .replica(n % 2)
            .send("opened", &format!("open-{id}"), json!({"id": id}))
            .await;
        assert_eq!(status, 202, "{body}");
        accepted.push(Accepted {
            event_id: format!("open-{id}"),
            transfer: id.clone(),
            instance: body["instance"].as_str().unwrap().to_owned(),
            dedup: false,
            slot: n % 2,
            attempts: 1,
        });
        let (a, b) = (format!("bump-a-{id}"), format!("bump-b-{id}"));
        let (first, second) = tokio::join!(
            fleet.replica(0).send("bumps", &a, json!({"id": id})),
            fleet.replica(1).send("bumps", &b, json!({"id": id})),
        );
        for (status, body) in [first, second] {
            // Consumed, refused as held, or too late for the wait: never anything else.
            assert!(matches!(status, 202 | 404 | 409), "{status} {body}");
            answered += usize::from(status == 202);
        }
    }
    assert_eq!(urls.len(), 2);
    let histories = fleet.histories_settled(RACES + answered, 0);
    let report = history::check(&histories, &accepted, &[], &fleet.killed(), &[], SEED);
    println!("{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_finds_two_commits_under_one_fence_when_the_fence_is_skipped() {
    let report = race_two_messages_per_wait(&["SUTRA_TEST_SKIP_FENCE"]).await;
    assert!(
        !report.found(TWO_COMMITS_UNDER_ONE_FENCE).is_empty(),
        "{RACES} races with the fence skipped and no two commits under one fence found: {report}"
    );
    // Both messages were taken by the one wait they raced for.
    assert!(
        !report.found(PARK_ANSWERED_TWICE).is_empty(),
        "{RACES} races with the fence skipped and no park answered twice found: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_finds_no_anomaly_when_two_messages_race_for_one_wait() {
    let report = race_two_messages_per_wait(&[]).await;
    assert!(report.commits >= 2 * RACES, "{report}");
    report.assert_clean();
}

/// Transfers through two replicas and their workers, until the ledger heard of each.
async fn transfer(switches: &[&str], count: usize) -> history::Report {
    let timing = Timing::SHORT;
    let cluster = DedicatedCluster::start().await;
    let receiver = Receiver::accepting();
    let deployment = transfers(&receiver.url("/ledger"));
    let fleet = (Fleet::of("acks", 2, timing).switches(switches))
        .start(cluster.url(), &deployment)
        .await;
    let urls = fleet.urls();
    let workers = Workers::start(&urls, timing);
    let http = reqwest::Client::new();
    let started = std::time::Instant::now();
    let mut accepted = Vec::new();
    for n in 0..count {
        accepted.push(send_transfer(&http, &urls, n % 2, &format!("t{n}")).await);
    }
    let bound = Duration::from_secs(30);
    wait_for_ledger(&receiver, count, started, bound, fleet.replica(0)).await;
    workers.stop().await;
    let heard = heard(&receiver);
    let histories = fleet.histories_settled(accepted.len(), distinct(&heard));
    let report = history::check(&histories, &accepted, &heard, &fleet.killed(), &[], SEED);
    println!("{report}");
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_finds_an_answer_before_its_commit() {
    let report = transfer(&["SUTRA_TEST_ACK_BEFORE_COMMIT"], 10).await;
    assert!(
        !report.found(ANSWERED_BEFORE_COMMIT).is_empty(),
        "answers sent before their commits, and none found: {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_finds_no_anomaly_in_transfers_through_two_replicas() {
    let report = transfer(&[], 20).await;
    assert!(
        report.commits >= 3 * 20,
        "a start and two completions per transfer: {report}"
    );
    assert!(report.terms >= 4, "every role led at least once: {report}");
    report.assert_clean();
}

/// A flow that parks on one task and ends when it is done.
const ONE_TASK: &str = r#"
name: chores
channels:
  chores:
    transport: http
flows:
  chore:
    start: { channel: chores }
    nodes:
      - id: sweep
        task: { topic: sweep, lock: PT30S }
      - id: done
        end: {}
"#;

/// One task, polled by one worker and then, while that lock lives, by another: the second poll
/// finds it only if a poll can take a live lock. The last lock taken completes it. Returns how
/// many tasks the second poll got, and the history check.
async fn poll_a_held_task_again(switches: &[&str]) -> (usize, history::Report) {
    let cluster = DedicatedCluster::start().await;
    let fleet = (Fleet::of("steal", 1, Timing::SHORT).switches(switches))
        .start(cluster.url(), ONE_TASK)
        .await;
    let replica = fleet.replica(0);
    let (status, body) = replica.send("chores", "chore-1", json!({})).await;
    assert_eq!(status, 202, "{body}");
    let poll =
        |worker: &str, wait: &str| json!({"worker": worker, "topics": ["sweep"], "wait": wait});
    let (status, first) = replica
        .post_json("/v1/tasks/poll", &poll("w1", "PT10S"))
        .await;
    assert_eq!(
        (status, first.as_array().map(Vec::len)),
        (200, Some(1)),
        "{first}"
    );
    let (status, second) = replica
        .post_json("/v1/tasks/poll", &poll("w2", "PT0S"))
        .await;
    assert_eq!(status, 200, "{second}");
    let stolen = second.as_array().map_or(0, Vec::len);
    // The last lock taken completes the task, and the run settles: its instance ends.
    let holder = if stolen > 0 { &second[0] } else { &first[0] };
    let done = json!({"lock_token": holder["lock_token"], "output": {}});
    let path = format!("/v1/tasks/{}/complete", holder["id"].as_str().unwrap());
    let (status, body) = replica.post_json(&path, &done).await;
    assert_eq!(status, 200, "{body}");
    // The completion was answered after its events were written; the thread reading the
    // replica's stderr may not have read them yet: the start's commit and the completion's.
    let histories = fleet.histories_holding(&[("task_completed", 1), ("commit", 2)]);
    let report = history::check(&histories, &[], &[], &fleet.killed(), &[], SEED);
    println!("{report}");
    (stolen, report)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_finds_a_task_held_under_two_locks_when_a_poll_steals_a_live_lock() {
    let (stolen, report) = poll_a_held_task_again(&["SUTRA_TEST_STEAL_LOCKS"]).await;
    assert_eq!(
        stolen, 1,
        "the switch hands the held task out again: {report}"
    );
    assert!(
        !report.found(LOCKED_TWICE).is_empty(),
        "a task handed to a second worker while the first held it, and no two locks found: \
         {report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_checker_finds_no_anomaly_when_a_held_task_is_polled_again() {
    let (stolen, report) = poll_a_held_task_again(&[]).await;
    assert_eq!(stolen, 0, "{report}");
    assert_eq!(report.locks, 1, "{report}");
    report.assert_clean();
}

/// A history as replica `r1` would have logged it, one line per event, in order.
fn logged(events: &[serde_json::Value]) -> Vec<Incarnation> {
    let stderr = events
        .iter()
        .enumerate()
        .map(|(n, event)| {
            let mut event = event.clone();
            event["replica"] = json!("r1");
            event["seq"] = json!(n + 1);
            format!("2026-12-03T00:00:00Z  INFO sutra::history: {event}\n")
        })
        .collect();
    vec![Incarnation {
        replica: "r1".to_owned(),
        stderr,
    }]
}

/// A step of instance `i` committed by `r1`: `fields` say what else it did.
fn commit(fence: i64, seqs: (i64, i64), fields: serde_json::Value) -> serde_json::Value {
    let mut commit = json!({
        "ev": "commit", "lane": "r1/lane-0", "tenant": "t", "instance": "i", "kind": "resume",
        "claimed": fence - 1, "fence": fence, "seq_first": seqs.0, "seq_last": seqs.1,
        "park": null, "took": null, "asked": [], "disarmed": [], "outbox": [],
        "status": "suspended",
    });
    for (field, value) in fields.as_object().unwrap() {
        commit[field] = value.clone();
    }
    commit
}

fn locked(task: &str, lock: &str, at: i64, until: i64) -> serde_json::Value {
    json!({"ev": "task_locked", "tenant": "t", "task": task, "attempt": 1, "lock": lock,
           "at": at, "until": until, "via": "poll"})
}

fn completed(task: &str, lock: &str, at: i64) -> serde_json::Value {
    json!({"ev": "task_completed", "tenant": "t", "task": task, "lock": lock, "at": at})
}

fn checked(events: &[serde_json::Value], heard: &[&str]) -> history::Report {
    let heard: Vec<String> = heard.iter().map(|key| (*key).to_owned()).collect();
    history::check(&logged(events), &[], &heard, &[], &[], SEED)
}

#[test]
fn the_checker_finds_a_task_held_under_two_locks_at_once() {
    let report = checked(
        &[
            locked("i:2", "aa", 100, 2_000),
            locked("i:2", "bb", 1_500, 3_500),
        ],
        &[],
    );
    assert_eq!(report.found(LOCKED_TWICE).len(), 1, "{report}");
    // One lock after the other has expired is how a task passes on.
    let report = checked(
        &[
            locked("i:2", "aa", 100, 2_000),
            locked("i:2", "bb", 2_100, 4_100),
        ],
        &[],
    );
    report.assert_clean();
}

/// A task locked for a waiting poll that went away is handed back unheard (decision 0039): a
/// lock answered to a worker must never be one of those — the worker would still be running the
/// task while another takes it.
#[test]
fn the_checker_finds_a_lock_answered_to_a_worker_and_handed_back_as_unheard() {
    let unheard = |lock: &str, at: i64| json!({"ev": "task_unheard", "tenant": "t", "task": "i:2", "lock": lock, "at": at});
    let report = checked(&[locked("i:2", "aa", 100, 2_000), unheard("aa", 150)], &[]);
    assert_eq!(report.found(ANSWERED_AND_UNHEARD).len(), 1, "{report}");
    // A lock nobody was answered, handed back, then the task polled again: clean.
    let report = checked(&[unheard("aa", 150), locked("i:2", "bb", 200, 2_200)], &[]);
    report.assert_clean();
}

/// Chaos seed 4 found this in the checker: a lock taken on a step's commit (`via: take`) was
/// answered by a replica that stalled past the lock's expiry, after another worker had polled,
/// locked and completed the task. The late answer is no lock held after the completion: the
/// span it records is empty.
#[test]
fn a_lock_answered_after_it_expired_spans_nothing() {
    let report = checked(
        &[
            locked("i:2", "bb", 2_529, 4_511),
            completed("i:2", "bb", 2_579),
            locked("i:2", "aa", 3_301, 2_506),
        ],
        &[],
    );
    assert!(report.found(LOCKED_AFTER_COMPLETION).is_empty(), "{report}");
    assert!(report.found(LOCKED_TWICE).is_empty(), "{report}");
}

#[test]
fn the_checker_finds_a_task_locked_after_its_completion_and_a_completion_nobody_consumed() {
    let report = checked(
        &[
            locked("i:2", "aa", 100, 2_000),
            completed("i:2", "aa", 500),
            locked("i:2", "bb", 2_100, 4_100),
        ],
        &[],
    );
    assert_eq!(report.found(LOCKED_AFTER_COMPLETION).len(), 1, "{report}");
    assert_eq!(report.found(COMPLETION_NOT_CONSUMED).len(), 1, "{report}");
    // Consumed in place by the step that answered its park: clean.
    let report = checked(
        &[
            commit(
                0,
                (1, 3),
                json!({"kind": "start", "claimed": null, "asked": [2]}),
            ),
            locked("i:2", "aa", 100, 2_000),
            commit(
                1,
                (4, 6),
                json!({"kind": "complete", "park": 2, "status": "completed"}),
            ),
            completed("i:2", "aa", 500),
        ],
        &[],
    );
    report.assert_clean();
}

#[test]
fn the_checker_finds_an_asked_task_neither_taken_nor_resolved() {
    let start = commit(
        0,
        (1, 3),
        json!({"kind": "start", "claimed": null, "asked": [2, 3]}),
    );
    let report = checked(std::slice::from_ref(&start), &[]);
    assert_eq!(report.found(ASKED_NOT_RESOLVED).len(), 2, "{report}");
    // Park 2 answered, park 3 disarmed by the same step: both resolved.
    let next = commit(1, (4, 5), json!({"park": 2, "disarmed": [3]}));
    checked(&[start.clone(), next], &[]).assert_clean();
    // Or the instance ended: whatever it still asked is resolved with it.
    let cancelled = commit(1, (4, 5), json!({"status": "cancelled"}));
    checked(&[start, cancelled], &[]).assert_clean();
}

#[test]
fn the_checker_finds_an_outbox_row_never_sent_and_a_key_no_commit_wrote() {
    let emitting = commit(
        0,
        (1, 4),
        json!({"kind": "start", "claimed": null,
                                            "outbox": ["i:3:notify"], "status": "completed"}),
    );
    let report = checked(std::slice::from_ref(&emitting), &["j:3:notify"]);
    assert_eq!(report.found(OUTBOX_NOT_SENT).len(), 1, "{report}");
    assert_eq!(report.found(OUTBOX_UNKNOWN).len(), 1, "{report}");
    // Heard by the receiver, or recorded sent by a replica: either will do.
    checked(std::slice::from_ref(&emitting), &["i:3:notify"]).assert_clean();
    let sent = json!({"ev": "sent", "instance": "i", "key": "i:3:notify"});
    checked(&[emitting, sent], &[]).assert_clean();
}

/// A group whose `COMMIT` failed records its members as `commit_unknown`: it may have landed with
/// its answer lost. One that a later claim shows landed (it read its fence) is a link of the
/// chain; one whose step was run again alone and committed under the same fence had not landed.
#[test]
fn a_commit_of_unknown_outcome_counts_once_what_followed_shows_it_landed() {
    let start = commit(0, (1, 1), json!({"kind": "start", "claimed": null}));
    let unknown = commit(1, (2, 2), json!({"ev": "commit_unknown"}));
    let next = commit(2, (3, 3), json!({}));
    // Landed: without it, the chain would miss audit sequence 2.
    checked(&[start.clone(), unknown.clone(), next.clone()], &[]).assert_clean();
    // Not landed: counted, it would be a second commit under fence 1.
    let again = commit(1, (2, 2), json!({}));
    checked(&[start, unknown, again, next], &[]).assert_clean();
}

/// A poll's lock commits asynchronously (decision 0035): a database crash within the WAL
/// writer's delay may lose it, and the task is polled again under a new lock once the database
/// is back — while the lost lock's deadline still runs. Chaos seed 1796615173283831508 found the
/// pair. With the crash known, the lost lock ends at it; without, it is two locks at once.
#[test]
fn a_polled_lock_a_database_crash_lost_unflushed_ends_at_the_crash() {
    let events = [
        locked("i:2", "aa", 100_000, 2_100_000),
        locked("i:2", "bb", 1_900_000, 3_900_000),
        completed("i:2", "bb", 2_000_000),
    ];
    let with_crash =
        |crashes: &[i64]| history::check(&logged(&events), &[], &[], &[], crashes, SEED);
    let report = with_crash(&[]);
    assert_eq!(report.found(LOCKED_TWICE).len(), 1, "{report}");
    assert_eq!(report.found(LOCKED_AFTER_COMPLETION).len(), 1, "{report}");
    assert!(with_crash(&[300_000]).found(LOCKED_TWICE).is_empty());
    // A crash long after the lock was answered found it on disk: the pair stays an anomaly.
    let report = with_crash(&[1_800_000]);
    assert_eq!(report.found(LOCKED_TWICE).len(), 1, "{report}");
}

/// A parent `p` whose start calls child `c` on park 4, the child's one step ending it and
/// reporting to that park, and the parent's step hearing of it.
fn a_call_heard() -> [serde_json::Value; 3] {
    [
        commit(
            0,
            (1, 2),
            json!({"instance": "p", "kind": "start", "claimed": null,
                   "called": [{"child": "c", "park": 4}]}),
        ),
        commit(
            1,
            (1, 2),
            json!({"instance": "c", "claimed": 0, "status": "completed",
                   "reported": {"parent": "p", "park": 4}}),
        ),
        commit(
            1,
            (3, 4),
            json!({"instance": "p", "park": 4, "status": "completed"}),
        ),
    ]
}

#[test]
fn the_checker_finds_a_child_reported_twice_and_ended_twice() {
    let heard = a_call_heard();
    checked(&heard, &[]).assert_clean();
    let again = commit(
        2,
        (3, 3),
        json!({"instance": "c", "status": "completed", "reported": {"parent": "p", "park": 4}}),
    );
    let report = checked(
        &[heard[0].clone(), heard[1].clone(), again, heard[2].clone()],
        &[],
    );
    assert_eq!(report.found(REPORTED_TWICE).len(), 1, "{report}");
    assert_eq!(report.found(ENDED_TWICE).len(), 1, "{report}");
    assert_eq!(report.anomalies.len(), 2, "{report}");
}

#[test]
fn the_checker_finds_a_call_unheard_a_child_that_never_ran_and_a_report_for_no_call() {
    let [call, child, _] = a_call_heard();
    // The parent never heard of its child's end: the call's park is asked and unresolved.
    let report = checked(&[call.clone(), child.clone()], &[]);
    assert_eq!(report.found(ASKED_NOT_RESOLVED).len(), 1, "{report}");
    // A child called and never run.
    let report = checked(std::slice::from_ref(&call), &[]);
    assert_eq!(report.found(CHILD_NEVER_RAN).len(), 1, "{report}");
    // A child reporting to a park its parent never called it on.
    let stray = commit(
        1,
        (1, 1),
        json!({"instance": "d", "claimed": 0, "status": "completed",
               "reported": {"parent": "p", "park": 5}}),
    );
    let [call, child, parent] = a_call_heard();
    let report = checked(&[call, child, stray, parent], &[]);
    assert_eq!(report.found(UNCALLED_CHILD).len(), 1, "{report}");
}

#[test]
fn the_checker_finds_a_completion_compensated_twice() {
    let start = commit(0, (1, 1), json!({"kind": "start", "claimed": null}));
    let first = commit(1, (2, 3), json!({"compensated": [0]}));
    let second = commit(2, (4, 5), json!({"compensated": [1]}));
    checked(&[start.clone(), first.clone(), second], &[]).assert_clean();
    let again = commit(2, (4, 5), json!({"compensated": [0]}));
    let report = checked(&[start, first, again], &[]);
    assert_eq!(report.found(COMPENSATED_TWICE).len(), 1, "{report}");
}

#[test]
fn the_checker_finds_a_schedule_tick_that_started_two_instances() {
    let tick = |instance: &str| {
        commit(
            0,
            (1, 1),
            json!({"instance": instance, "kind": "start", "claimed": null,
                   "channel": "schedule:tick", "event_id": "clock/tick@1"}),
        )
    };
    let report = checked(&[tick("a")], &[]);
    assert_eq!(report.ticks, 1, "{report}");
    report.assert_clean();
    let report = checked(&[tick("a"), tick("b")], &[]);
    assert_eq!(report.found(CONSUMED_TWICE).len(), 1, "{report}");
}
