//! The pulse (decision 0061) on a manual clock: every ten seconds a sample of what this replica's
//! steps did since the last — committed, and the instances they failed, with their latency — and
//! of the backlog the database counts then; an interval without a step has no latency, and no
//! more than fifteen minutes are kept. A scrape reads the backlog the sampler counted last
//! (decision 0065). A tenant's samples hold its own steps and no backlog (decision 0076).

mod common;

use std::time::Duration;

use serde_json::json;
use sutra_engine::EngineConfig;
use sutra_engine::pulse::{Depth, SAMPLE_INTERVAL, SAMPLES_KEPT, Sample};

use common::{Harness, TENANT, eventually};

const FLOWS: &str = r#"
name: orders
channels:
  orders: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: route
        choice:
          - when: vars.input.kind == "fail"
            next: broken
        otherwise: work
      - id: work
        task: { topic: pulse-work, input: {} }
        next: done
      - id: broken
        fail: { code: ORDER.BROKEN, detail: broken on purpose }
      - id: done
        end: {}
"#;

/// The samples, once there are `count`.
async fn samples(harness: &Harness, count: usize) -> Vec<Sample> {
    eventually(&format!("{count} samples"), || async {
        let samples = harness.engine.pulse().samples(None);
        (samples.len() >= count).then_some(samples)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_interval_is_sampled_with_its_steps_failures_latency_and_backlog() {
    let harness = Harness::start(FLOWS, EngineConfig::default()).await;
    for id in ["a", "b"] {
        harness
            .send("orders", id, json!({"id": id, "kind": "work"}))
            .await;
    }
    harness
        .send("orders", "c", json!({"id": "c", "kind": "fail"}))
        .await;

    harness.advance(SAMPLE_INTERVAL);
    let [busy] = &samples(&harness, 1).await[..] else {
        unreachable!("one sample")
    };
    assert_eq!((busy.steps, busy.steps_failed), (3, 0), "three starts");
    assert_eq!(busy.instances_failed, 1);
    assert!(
        busy.latency
            .is_some_and(|latency| latency.p50 <= latency.p99)
    );
    let backlog = busy.backlog.expect("the backlog was counted");
    assert_eq!((backlog.tasks_available, backlog.inbox), (2, 0));
    assert_eq!(busy.seconds, SAMPLE_INTERVAL.as_secs_f64());
    assert_eq!(busy.at, harness.engine.clock().now());
    let pulse = harness.engine.pulse();
    let [own] = &pulse.samples(Some(TENANT))[..] else {
        unreachable!("one sample")
    };
    assert_eq!(
        (own.steps, own.instances_failed, own.latency, own.backlog),
        (3, 1, busy.latency, None),
        "the tenant's own steps, and no backlog"
    );
    let [other] = &pulse.samples(Some("initech"))[..] else {
        unreachable!("one sample")
    };
    assert_eq!((other.steps, other.latency, other.at), (0, None, busy.at));

    harness.advance(SAMPLE_INTERVAL);
    let idle = &samples(&harness, 2).await[1];
    assert_eq!(
        (idle.steps, idle.instances_failed, idle.latency),
        (0, 0, None)
    );
    assert_eq!(idle.backlog, busy.backlog, "the tasks still wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifteen_minutes_of_samples_are_kept() {
    let harness = Harness::start(FLOWS, EngineConfig::default()).await;
    let started = harness.engine.pulse().since();
    for _ in 0..SAMPLES_KEPT + 2 {
        harness.advance(SAMPLE_INTERVAL);
        // One sample per advance: the next advance waits for this one to be kept.
        eventually("the sample of this interval", || async {
            let last = harness
                .engine
                .pulse()
                .samples(None)
                .last()
                .map(|sample| sample.at);
            (last == Some(harness.engine.clock().now())).then_some(())
        })
        .await;
    }
    let kept = harness.engine.pulse().samples(None);
    assert_eq!(kept.len(), SAMPLES_KEPT);
    let oldest = started + Duration::from_secs(30);
    assert_eq!(kept[0].at, oldest, "the first two were dropped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scrape_between_samples_reads_the_last_count_and_a_sample_counts_again() {
    let harness = Harness::start(FLOWS, EngineConfig::default()).await;
    harness
        .send("orders", "a", json!({"id": "a", "kind": "work"}))
        .await;
    let counted = |backlog: Option<sutra_store::Backlog>| {
        Depth::of(&backlog.expect("the backlog was counted")).tasks_available
    };
    // Nothing counted yet: the scrape counts.
    assert_eq!(counted(harness.engine.scraped_backlog().await), 1);

    harness
        .send("orders", "b", json!({"id": "b", "kind": "work"}))
        .await;
    assert_eq!(
        counted(harness.engine.scraped_backlog().await),
        1,
        "within the interval, the last count"
    );
    let now = harness.engine.backlog(None).await.unwrap();
    assert_eq!(Depth::of(&now).tasks_available, 2, "counted when asked");

    harness.advance(SAMPLE_INTERVAL);
    let [sample] = &samples(&harness, 1).await[..] else {
        unreachable!("one sample")
    };
    assert_eq!(
        sample.backlog.map(|backlog| backlog.tasks_available),
        Some(2)
    );
    // A third task, armed after the sample: the scrape still reads the sample's count.
    harness
        .send("orders", "c", json!({"id": "c", "kind": "work"}))
        .await;
    assert_eq!(
        counted(harness.engine.scraped_backlog().await),
        2,
        "the sampler's count"
    );
}
