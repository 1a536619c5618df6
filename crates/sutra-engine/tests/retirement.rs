//! The retirement gate (SPEC §7.3) on a manual clock: a draining version is kept by its unended
//! instances, its pending outbox rows and its live tasks, each count falls as its blocker is
//! resolved, and the version retires only once all three are zero. Moved from
//! `crates/sutra-cli/tests/retirement.rs`, where the embedded store's run waited out a webhook's
//! real backoffs (some fourteen seconds); the PostgreSQL run, where every replica must give the
//! same answer over HTTP, stays there.

mod common;

use std::time::Duration;

use jiff::SignedDuration;
use serde_json::json;
use sutra_core::snapshot::Status;
use sutra_engine::EngineConfig;
use sutra_store::{DeploymentStatus, Retirement};

use common::{GRACE, Harness, TENANT};

const RETIRE_INTERVAL: Duration = Duration::from_millis(200);
/// The webhook refuses three tries, a minute apart and doubling: far longer than the rest of the
/// story moves the clock.
const OUTBOX_BACKOFF: Duration = Duration::from_secs(60);

/// Each order does what its `kind` says — wait for a reply, park on a task, fail, or emit to a
/// webhook that refuses its first tries — and version 2 is the same document again.
const SHOP: &str = r#"
name: shop
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.id }
  ledger: { transport: http, url: "http://127.0.0.1:9/ledger" }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: route
        choice:
          - when: vars.input.kind == "task"
            next: work
          - when: vars.input.kind == "fail"
            next: broken
          - when: vars.input.kind == "emit"
            next: notify
        otherwise: wait
      - id: wait
        receive: { channel: replies, key: vars.input.id }
        next: done
      - id: work
        task: { topic: retirement-work, input: {} }
        next: done
      - id: broken
        fail: { code: ORDER.BROKEN, detail: broken on purpose }
      - id: notify
        emit: { channel: ledger, data: { order: "= vars.input.id" } }
        next: done
      - id: done
        end: {}
"#;

fn config() -> EngineConfig {
    EngineConfig {
        retire_interval: SignedDuration::try_from(RETIRE_INTERVAL).unwrap(),
        // A version retires no sooner than a claim timeout after its successor was stored.
        claim_timeout: SignedDuration::from_secs(1),
        outbox_backoff: SignedDuration::try_from(OUTBOX_BACKOFF).unwrap(),
        ..EngineConfig::default()
    }
}

async fn start(harness: &Harness, id: &str, kind: &str) -> String {
    let data = json!({"id": id, "kind": kind});
    harness.send("orders", &format!("evt-{id}"), data).await
}

fn kept(instances: u64, outbox: u64, tasks: u64) -> Option<Retirement> {
    Some(Retirement {
        instances,
        outbox,
        tasks,
    })
}

/// Version 1's status, and what keeps it while it drains.
async fn version_1(harness: &Harness) -> (DeploymentStatus, Option<Retirement>) {
    let store = harness.engine.store();
    let deployments = store.deployments(Some(TENANT)).await.unwrap();
    let status = deployments
        .iter()
        .find(|d| d.name == "shop" && d.version == 1)
        .expect("version 1")
        .status;
    let blockers = match status {
        DeploymentStatus::Draining => Some(store.retirement(TENANT, "shop", 1).await.unwrap()),
        _ => None,
    };
    (status, blockers)
}

/// Lets the gate look again, then waits until version 1 is `status`, kept by `blockers`.
async fn until_version_1_is(
    harness: &Harness,
    status: DeploymentStatus,
    blockers: Option<Retirement>,
) {
    harness.advance(RETIRE_INTERVAL);
    tokio::time::sleep(GRACE).await;
    let expected = (status, blockers);
    let what = format!("version 1 {expected:?}");
    let answered = common::eventually(&what, || async {
        (version_1(harness).await == expected).then_some(())
    });
    harness.nudging(answered).await;
}

/// Waits until `instance`'s outbox row has recorded `sends` tries.
async fn until_tried(harness: &Harness, instance: &str, sends: u32) {
    let what = format!("{sends} sends");
    let tried = common::eventually(&what, || async {
        let rows = harness
            .engine
            .store()
            .outbox(TENANT, instance)
            .await
            .unwrap();
        (rows[0].attempts == sends).then_some(())
    });
    harness.nudging(tried).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_version_retires_only_once_nothing_keeps_it_on_sqlite() {
    use DeploymentStatus::{Draining, Retired};
    let harness = Harness::start(SHOP, config()).await;
    harness.sender.fail_next(3);
    let emitting = start(&harness, "o-emit", "emit").await;
    let waiting = start(&harness, "o-wait", "wait").await;
    let tasked = start(&harness, "o-task", "task").await;
    let failed = start(&harness, "o-fail", "fail").await;
    harness.wait_for_status(&failed, Status::Failed).await;
    let deployed = harness.engine.deploy(TENANT, SHOP).await.unwrap();
    assert_eq!(deployed.record.version, 2);
    until_tried(&harness, &emitting, 1).await;
    // Past the claim timeout since version 2 was stored: from now on only blockers keep it.
    harness.advance(Duration::from_secs(1));

    until_version_1_is(&harness, Draining, kept(3, 1, 1)).await;

    harness
        .send("replies", "evt-reply", json!({"id": "o-wait"}))
        .await;
    harness.wait_for_status(&waiting, Status::Completed).await;
    until_version_1_is(&harness, Draining, kept(2, 1, 1)).await;

    let lock = SignedDuration::from_mins(1);
    let task = harness.poll_one("w", "retirement-work", lock).await;
    harness
        .engine
        .complete_task(TENANT, &task.id, &task.lock_token, &json!({}), None)
        .await
        .expect("the task completes");
    harness.wait_for_status(&tasked, Status::Completed).await;
    until_version_1_is(&harness, Draining, kept(1, 1, 0)).await;

    harness
        .engine
        .cancel(TENANT, &failed)
        .await
        .expect("cancelled");
    // Only the outbox row keeps it now, until the webhook takes it.
    until_version_1_is(&harness, Draining, kept(0, 1, 0)).await;
    for (backoff, sends) in [
        (OUTBOX_BACKOFF, 2),
        (2 * OUTBOX_BACKOFF, 3),
        (4 * OUTBOX_BACKOFF, 4),
    ] {
        harness.advance(backoff);
        until_tried(&harness, &emitting, sends).await;
    }
    assert_eq!(
        harness.sender.sends().len(),
        4,
        "three refusals, then the acceptance"
    );
    until_version_1_is(&harness, Retired, None).await;
}

/// An order that emits to a webhook which refuses every try, on a channel that gives up after
/// two; version 2 is the same document again.
const GIVING_UP: &str = r#"
name: shop
channels:
  orders: { transport: http, correlate: data.id }
  ledger: { transport: http, url: "http://127.0.0.1:9/ledger", max-attempts: 2 }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: notify
        emit: { channel: ledger, data: { order: "= vars.input.id" } }
      - id: done
        end: {}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poisoned_outbox_row_no_longer_keeps_its_draining_version() {
    use DeploymentStatus::{Draining, Retired};
    let harness = Harness::start(GIVING_UP, config()).await;
    harness.sender.fail_next(usize::MAX);
    let emitting = start(&harness, "o-emit", "emit").await;
    harness.wait_for_status(&emitting, Status::Completed).await;
    until_tried(&harness, &emitting, 1).await;
    harness.engine.deploy(TENANT, GIVING_UP).await.unwrap();
    harness.advance(Duration::from_secs(1));
    until_version_1_is(&harness, Draining, kept(0, 1, 0)).await;

    // The second refusal reaches the channel's `max-attempts`: the row is poisoned, kept and
    // visible, and never sent again.
    harness.advance(OUTBOX_BACKOFF);
    until_tried(&harness, &emitting, 2).await;
    let rows = harness
        .engine
        .store()
        .outbox(TENANT, &emitting)
        .await
        .unwrap();
    assert!(rows[0].poisoned, "{:?}", rows[0]);
    assert_eq!(rows[0].sent_at, None);

    // Short of the harness's own patience, so that a version kept anyway says what kept it.
    let retiring = until_version_1_is(&harness, Retired, None);
    let retired = tokio::time::timeout(Duration::from_secs(15), retiring).await;
    assert!(
        retired.is_ok(),
        "version 1 did not retire, its only blocker a poisoned row: {:?}",
        version_1(&harness).await
    );
}
