//! Schedules through `sutra serve` (issue 34, decision 0056): the API and the CLI list, pause and
//! resume one on the embedded store; on PostgreSQL three replicas start exactly one instance per
//! tick while the `scheduler` lease holder is SIGKILLed twice, the instances counted by the tick
//! each carries. Overlap, catch-up and a deploy's replacement are shown on a manual clock in
//! `sutra-engine/tests/schedules.rs`.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_testkit::postgres::DedicatedCluster;
use sutra_testkit::{Scratch, Server, at_lanes_1_and_4, serve, until};

use common::{Fleet, Timing};

/// A flow started every second, which ends at once with the tick in its vars.
const TICKS: &str = r#"
name: clock
flows:
  tick:
    start:
      schedule:
        every: PT1S
        overlap: allow
        input: { at: "= tick" }
    nodes:
      - id: done
        end: {}
"#;

/// Ticks the PostgreSQL test counts.
const TICKS_COUNTED: usize = 30;

/// Every instance of the `tick` flow, read from `server`: the tick (`vars.input.at`) of each.
async fn ticks(server: &Server) -> Vec<String> {
    let mut ticks = Vec::new();
    let mut after = None;
    loop {
        let cursor = after
            .map(|next| format!("&after={next}"))
            .unwrap_or_default();
        let (status, page) = server
            .get(&format!(
                "/v1/instances?flow=tick&vars=true&limit=500{cursor}"
            ))
            .await;
        assert_eq!(status, 200, "{page}");
        for instance in page["items"].as_array().expect("items") {
            let at = instance["vars"]["input"]["at"].as_str().expect("a tick");
            ticks.push(at.to_owned());
        }
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return ticks,
        }
    }
}

/// `sutra ARGS --json` against `server`, parsed.
fn sutra_json(server: &Server, args: &[&str]) -> Value {
    let output = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .arg("--json")
        .env("SUTRA_SERVER", server.url(""))
        .output()
        .expect("the sutra binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{args:?}: {stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{args:?} printed {stdout}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_is_listed_paused_and_resumed_through_the_api_and_the_cli() {
    let scratch = Scratch::new("schedules");
    let server = Server::start(&serve!(scratch.database()).env("SUTRA_SCHEDULES_POLL", "PT0.2S"));
    server.deploy_accepted(TICKS).await;
    until("the first tick's instance", async || {
        !ticks(&server).await.is_empty()
    })
    .await;

    let listed = sutra_json(&server, &["schedules", "list"]);
    let schedule = &listed["items"][0];
    assert_eq!(
        (
            &schedule["deployment"],
            &schedule["flow"],
            &schedule["version"]
        ),
        (&json!("clock"), &json!("tick"), &json!(1)),
        "{listed}"
    );
    assert_eq!(schedule["expression"], "every PT1S");
    assert_eq!(schedule["timezone"], "UTC");
    assert_eq!(schedule["paused"], false);
    assert!(
        schedule["next_at"].is_string() && schedule["last_instance"].is_string(),
        "{listed}"
    );

    let paused = sutra_json(&server, &["schedules", "pause", "clock", "tick"]);
    assert_eq!(paused["paused"], true, "{paused}");
    // A pass that read the row before the pause may still fire one tick.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = ticks(&server).await.len();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        ticks(&server).await.len(),
        before,
        "a paused schedule fired"
    );
    let (_, shown) = server.get("/v1/schedules").await;
    assert_eq!(
        shown["items"][0]["paused"], true,
        "the pause is the row's: {shown}"
    );

    let resumed = sutra_json(&server, &["schedules", "resume", "clock", "tick"]);
    assert_eq!(resumed["paused"], false, "{resumed}");
    until("a tick after the resume", async || {
        ticks(&server).await.len() > before
    })
    .await;

    let (status, problem) = server
        .post_json("/v1/schedules/clock/nothing/pause", &json!({}))
        .await;
    assert_eq!(
        (status, &problem["code"]),
        (404, &json!("SUTRA.SCHEDULE.NOT_FOUND")),
        "{problem}"
    );
}

at_lanes_1_and_4!(a_tick_whose_leader_died_after_its_start_is_started_once);

async fn a_tick_whose_leader_died_after_its_start_is_started_once(lanes: usize) {
    let scratch = Scratch::new("tick-crash");
    let options = serve!(scratch.database())
        .lanes(lanes)
        .env("SUTRA_SCHEDULES_POLL", "PT0.2S");
    let mut dying = Server::start(&options.clone().fault("tick-started"));
    dying.deploy_accepted(TICKS).await;
    assert!(dying.wait_for_death(), "no tick was started");
    drop(dying);

    // The restarted leader finds the tick still due (its row was never moved on) and starts it
    // again: the inbox answers with the dead leader's instance.
    let server = Server::start(&options);
    until("three ticks", async || ticks(&server).await.len() >= 3).await;
    let seen = ticks(&server).await;
    let counted = distinct(&seen);
    assert!(
        counted.values().all(|n| *n == 1),
        "a tick started twice: {counted:?}"
    );
    assert_contiguous(&counted);
    let (_, listed) = server.get("/v1/schedules").await;
    assert!(listed["items"][0]["last_instance"].is_string(), "{listed}");
}

/// Every tick from the first counted to the last, a second apart: none missing.
fn assert_contiguous(counted: &BTreeMap<&str, usize>) {
    let instants: Vec<jiff::Timestamp> = counted
        .keys()
        .map(|tick| tick.parse().expect("an RFC 3339 tick"))
        .collect();
    let gaps: Vec<_> = instants
        .windows(2)
        .filter(|pair| pair[1].duration_since(pair[0]) != jiff::SignedDuration::from_secs(1))
        .collect();
    assert!(gaps.is_empty(), "ticks missing between: {gaps:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_tick_starts_exactly_one_instance_while_the_scheduler_leader_is_killed_twice() {
    let cluster = DedicatedCluster::start().await;
    let mut fleet = Fleet::of("ticks", 3, Timing::SHORT)
        .start(cluster.url(), TICKS)
        .await;
    let started = Instant::now();
    let mut kills = 0;
    loop {
        let seen = ticks(fleet.replica(live_slot(&fleet))).await;
        let span = distinct(&seen).len();
        if span >= TICKS_COUNTED {
            break;
        }
        // Kill the leader twice, once a third and once two thirds of the way.
        if kills < 2 && span >= (kills + 1) * TICKS_COUNTED / 3 {
            let leader = scheduler_leader(&fleet).await;
            println!("after {span} ticks: SIGKILL {}", fleet.replica_id(leader));
            fleet.kill(leader);
            kills += 1;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "{span} ticks in {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen = ticks(fleet.replica(live_slot(&fleet))).await;
    let counted = distinct(&seen);
    let twice: Vec<_> = counted.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "ticks started more than once: {twice:?}");
    assert_contiguous(&counted);
    assert_eq!(kills, 2);
    println!(
        "{} ticks, each started once, across two leader kills",
        counted.len()
    );
}

/// How many instances each tick started.
fn distinct(ticks: &[String]) -> BTreeMap<&str, usize> {
    let mut counted = BTreeMap::new();
    for tick in ticks {
        *counted.entry(tick.as_str()).or_default() += 1;
    }
    counted
}

fn live_slot(fleet: &Fleet) -> usize {
    (0..fleet.size())
        .find(|slot| fleet.is_up(*slot))
        .expect("a live replica")
}

/// The slot of the live replica that says it leads `scheduler` now.
async fn scheduler_leader(fleet: &Fleet) -> usize {
    let began = Instant::now();
    loop {
        for slot in (0..fleet.size()).filter(|slot| fleet.is_up(*slot)) {
            let (status, leases) = fleet.replica(slot).get("/v1/leases").await;
            let leads = leases["leading"]
                .as_array()
                .is_some_and(|roles| roles.contains(&json!("scheduler")));
            if status == 200 && leads {
                return slot;
            }
        }
        assert!(
            began.elapsed() < Duration::from_secs(30),
            "no replica leads the scheduler"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
