//! Schedules on a manual clock (issue 34, decision 0056): each tick starts one instance, with the
//! tick as its time and the schedule's input; `overlap: skip` skips while the last one runs;
//! after an outage `catch-up: one` fires one tick for every missed one and `none` fires none; a
//! paused schedule fires nothing; a new version replaces the schedule and a version without it
//! removes it. Exactly-once across replicas and a leader's death is shown on PostgreSQL by
//! `sutra-cli/tests/schedules.rs`.

mod common;

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::json;
use sutra_core::snapshot::Status;
use sutra_engine::{DeployError, EngineConfig};
use sutra_store::{InstanceFilter, InstanceRecord, ScheduleKey, ScheduleRecord};

use common::{GRACE, Harness, TENANT, eventually};

const MINUTE: Duration = Duration::from_secs(60);

/// A tick's grace is twice the lease TTL: ticks later than 20 s are missed ones.
const LEASE_TTL: SignedDuration = SignedDuration::from_secs(10);

/// A flow started every minute, waiting on a task.
fn every_minute(overlap: &str, catch_up: &str) -> String {
    format!(
        r#"
name: reports
flows:
  nightly:
    start:
      schedule:
        every: PT1M
        overlap: {overlap}
        catch-up: {catch_up}
        input: {{ kind: nightly, at: "= tick" }}
    nodes:
      - id: compile
        task: {{ topic: compile }}
      - id: done
        end: {{}}
"#
    )
}

fn config() -> EngineConfig {
    EngineConfig {
        lease_ttl: LEASE_TTL,
        lease_poll: SignedDuration::from_secs(1),
        ..EngineConfig::default()
    }
}

async fn started(overlap: &str, catch_up: &str) -> Harness {
    let harness = Harness::start(&every_minute(overlap, catch_up), config()).await;
    schedule_of(&harness).await;
    harness
}

/// The schedule's row once the scheduler wrote it.
async fn schedule_of(harness: &Harness) -> ScheduleRecord {
    eventually("the schedule's row", || async {
        rows(harness).await.into_iter().next()
    })
    .await
}

async fn rows(harness: &Harness) -> Vec<ScheduleRecord> {
    harness
        .engine
        .store()
        .schedules(Some(TENANT))
        .await
        .expect("the store reads")
}

/// The flow's instances, oldest first.
async fn instances(harness: &Harness) -> Vec<InstanceRecord> {
    let filter = InstanceFilter {
        flow: Some("nightly".into()),
        ..InstanceFilter::default()
    };
    harness
        .engine
        .store()
        .instances(TENANT, &filter, usize::MAX)
        .await
        .expect("the store reads")
        .records
}

/// Waits until the flow has `count` instances; fails if it ever has more.
async fn wait_for_instances(harness: &Harness, count: usize) -> Vec<InstanceRecord> {
    eventually(&format!("{count} instances"), || async {
        let found = instances(harness).await;
        assert!(
            found.len() <= count,
            "{} instances, expected {count}",
            found.len()
        );
        (found.len() == count).then_some(())
    })
    .await;
    // Let a scheduler that would fire once more do so.
    tokio::time::sleep(GRACE).await;
    let settled = instances(harness).await;
    assert_eq!(settled.len(), count, "more instances than ticks");
    settled
}

/// The tick an instance was started for, as its input carries it.
fn tick(record: &InstanceRecord) -> Timestamp {
    let at = record.snapshot.vars["input"]["at"].as_str();
    at.expect("the tick in vars.input.at")
        .parse()
        .expect("an RFC 3339 tick")
}

fn at(text: &str) -> Timestamp {
    text.parse().expect("a timestamp")
}

/// Moves the clock on by `by`, then a second more in small steps: a scheduler that read the
/// time just before the jump sleeps a poll (1 s) from the new time, and must still look.
async fn advance(harness: &Harness, by: Duration) {
    harness.advance(by);
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        harness.advance(Duration::from_millis(50));
    }
    tokio::time::sleep(GRACE).await;
}

/// The first tick's instance, once it waits on its task: the clock moved on a minute.
async fn first_tick_waiting(harness: &Harness) -> Vec<InstanceRecord> {
    advance(harness, MINUTE).await;
    let first = wait_for_instances(harness, 1).await;
    harness
        .wait_for_status(&first[0].snapshot.instance.id, Status::Suspended)
        .await;
    first
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tick_starts_one_instance_with_the_tick_as_its_input() {
    let harness = started("allow", "one").await;
    assert_eq!(
        schedule_of(&harness).await.next_at,
        at("2030-01-01T00:01:00Z"),
        "every minute, counted from the epoch"
    );
    assert!(
        instances(&harness).await.is_empty(),
        "nothing before the first tick"
    );

    advance(&harness, MINUTE).await;
    let first = wait_for_instances(&harness, 1).await;
    assert_eq!(tick(&first[0]), at("2030-01-01T00:01:00Z"));
    assert_eq!(first[0].snapshot.vars["input"]["kind"], json!("nightly"));

    advance(&harness, MINUTE).await;
    let both = wait_for_instances(&harness, 2).await;
    assert_eq!(tick(&both[1]), at("2030-01-01T00:02:00Z"));
    let row = schedule_of(&harness).await;
    assert_eq!(row.last_at, Some(at("2030-01-01T00:02:00Z")));
    assert_eq!(
        row.last_instance.as_deref(),
        Some(both[1].snapshot.instance.id.as_str())
    );
    assert_eq!(row.next_at, at("2030-01-01T00:03:00Z"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlap_skip_skips_a_tick_while_the_last_instance_runs() {
    let harness = started("skip", "one").await;
    let first = first_tick_waiting(&harness).await;

    advance(&harness, MINUTE).await;
    wait_for_instances(&harness, 1).await;
    assert_eq!(
        schedule_of(&harness).await.next_at,
        at("2030-01-01T00:03:00Z"),
        "the skipped tick moved the schedule on"
    );

    let task = harness
        .poll_one("w1", "compile", SignedDuration::from_mins(1))
        .await;
    harness
        .engine
        .complete_task(TENANT, &task.id, &task.lock_token, &json!({}), None)
        .await
        .expect("the task completes");
    harness
        .wait_for_status(&first[0].snapshot.instance.id, Status::Completed)
        .await;
    advance(&harness, MINUTE).await;
    let both = wait_for_instances(&harness, 2).await;
    assert_eq!(tick(&both[1]), at("2030-01-01T00:03:00Z"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_one_fires_the_first_missed_tick_once_after_an_outage() {
    let harness = started("allow", "one").await;
    // Five ticks pass while no scheduler looks: 00:01 to 00:05, all more than 20 s late.
    advance(&harness, 5 * MINUTE + Duration::from_secs(30)).await;
    let caught_up = wait_for_instances(&harness, 1).await;
    assert_eq!(tick(&caught_up[0]), at("2030-01-01T00:01:00Z"));
    assert_eq!(
        schedule_of(&harness).await.next_at,
        at("2030-01-01T00:06:00Z"),
        "the other missed ticks are skipped"
    );
    advance(&harness, Duration::from_secs(30)).await;
    let next = wait_for_instances(&harness, 2).await;
    assert_eq!(tick(&next[1]), at("2030-01-01T00:06:00Z"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catch_up_none_skips_every_missed_tick() {
    let harness = started("allow", "none").await;
    advance(&harness, 5 * MINUTE + Duration::from_secs(30)).await;
    wait_for_instances(&harness, 0).await;
    assert_eq!(
        schedule_of(&harness).await.next_at,
        at("2030-01-01T00:06:00Z")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_schedule_fires_nothing_until_it_is_resumed() {
    let harness = started("allow", "none").await;
    let key = ScheduleKey {
        tenant: TENANT.into(),
        deployment: "reports".into(),
        flow: "nightly".into(),
    };
    let store = harness.engine.store();
    let paused = store.set_schedule_paused(&key, true).await.unwrap();
    assert!(paused.expect("the schedule").paused);
    advance(&harness, 3 * MINUTE).await;
    wait_for_instances(&harness, 0).await;

    store.set_schedule_paused(&key, false).await.unwrap();
    advance(&harness, MINUTE).await;
    let resumed = wait_for_instances(&harness, 1).await;
    assert_eq!(
        tick(&resumed[0]),
        at("2030-01-01T00:04:00Z"),
        "the paused ticks were missed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_replaces_the_schedule_and_one_without_it_removes_it() {
    let harness = started("allow", "none").await;
    let every_two = every_minute("allow", "none").replace("every: PT1M", "every: PT2M");
    harness
        .engine
        .deploy(TENANT, &every_two)
        .await
        .expect("v2 deploys");
    let replaced = eventually("version 2's schedule", || async {
        rows(&harness)
            .await
            .into_iter()
            .find(|row| row.version == 2)
    })
    .await;
    assert_eq!(replaced.expression, "every PT2M");

    advance(&harness, 2 * MINUTE).await;
    let started = wait_for_instances(&harness, 1).await;
    assert_eq!(
        started[0].snapshot.instance.version, 2,
        "the draining version fires nothing"
    );

    let unscheduled = r#"
name: reports
channels:
  requests: { transport: http }
flows:
  nightly:
    start: { channel: requests }
    nodes:
      - id: done
        end: {}
"#;
    harness
        .engine
        .deploy(TENANT, unscheduled)
        .await
        .expect("v3 deploys");
    eventually("the schedule's removal", || async {
        rows(&harness).await.is_empty().then_some(())
    })
    .await;
    advance(&harness, 2 * MINUTE).await;
    wait_for_instances(&harness, 1).await;
}

/// `flows` flows, each started every second.
fn every_second(flows: usize) -> String {
    let flows: String = (0..flows)
        .map(|n| {
            format!(
                "  tick{n}:\n    start: {{ schedule: {{ every: PT1S }} }}\n    nodes:\n      \
                 - id: done\n        end: {{}}\n"
            )
        })
        .collect();
    format!("name: ticks\nflows:\n{flows}")
}

/// A deployment whose schedules together tick more often than the engine fires for one (issue 48:
/// 10,000 flows every second were accepted, and every schedule fell behind) is refused at deploy,
/// naming the bound that refused it; within the bound it deploys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_ticking_more_often_than_the_bound_is_refused() {
    let harness = Harness::start(&every_minute("allow", "none"), config()).await;
    let refused = harness
        .engine
        .deploy(TENANT, &every_second(11))
        .await
        .expect_err("660 ticks a minute are past the default 600");
    let DeployError::Invalid(diagnostics) = refused else {
        panic!("refused as invalid, not {refused:?}");
    };
    assert_eq!(diagnostics.len(), 1, "{diagnostics:?}");
    assert_eq!(diagnostics[0].rule, "schedules-too-dense");
    assert!(
        diagnostics[0].message.contains("660 times a minute"),
        "{}",
        diagnostics[0].message
    );
    assert!(
        (diagnostics[0].hint.as_deref()).is_some_and(|h| h.contains("max-ticks-per-minute")),
        "{diagnostics:?}"
    );
    harness
        .engine
        .deploy(TENANT, &every_second(10))
        .await
        .expect("600 ticks a minute are within it");
}

/// A schedule is held to its tenant's live-instance quota as a sender is (decision 0079): with
/// room for one live instance, the first tick's instance — waiting on its task — fills it, and
/// the next ticks are skipped rather than growing the tenant past its quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_past_the_tenants_live_instance_quota_is_skipped() {
    let quota = EngineConfig {
        tenant_max_live_instances: 1,
        ..config()
    };
    let harness = Harness::start(&every_minute("allow", "one"), quota).await;
    schedule_of(&harness).await;
    first_tick_waiting(&harness).await;

    advance(&harness, MINUTE).await;
    advance(&harness, MINUTE).await;
    wait_for_instances(&harness, 1).await;
    assert_eq!(
        schedule_of(&harness).await.next_at,
        at("2030-01-01T00:04:00Z"),
        "the skipped ticks are passed, not left due"
    );
}
