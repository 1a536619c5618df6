//! Conformance of the schedule rows (issue 34): an activation syncs a deployment version's
//! schedules — a newer version replaces an older one's rows, keeping what the operator and the
//! scheduler wrote, and a late replica's older version changes nothing — and the scheduler's
//! advance is guarded by the tick it read, so of two leaders advancing one tick exactly one
//! writes.
//!
//! Ticks are fixed instants, whole minutes after [`EPOCH`]: the rows hold whatever times they are
//! given, and the due scan compares them with the `now` it is given, so no test waits.

use super::fixtures::*;
use crate::{Advance, NewSchedule, ScheduleKey, ScheduleRecord};

const PAYMENTS: &str = "payments";
const REFUNDS: &str = "refunds";
const NIGHTLY: &str = "nightly-settlement";
const HOURLY: &str = "hourly-sweep";
const DAILY_AT_TWO: &str = "cron 0 2 * * *";
const EVERY_HOUR: &str = "every PT1H";
const UTC: &str = "UTC";

/// 2026-01-01T00:00:00Z.
const EPOCH: i64 = 1_767_225_600;

/// `minutes` after [`EPOCH`].
fn tick(minutes: i64) -> Timestamp {
    Timestamp::from_second(EPOCH + minutes * 60).expect("a tick is in range")
}

fn schedule(flow: &str, expression: &str, zone: &str, next_at: Timestamp) -> NewSchedule {
    NewSchedule {
        flow: flow.to_owned(),
        expression: expression.to_owned(),
        zone: zone.to_owned(),
        next_at,
    }
}

fn key(tenant: &str, deployment: &str, flow: &str) -> ScheduleKey {
    ScheduleKey {
        tenant: tenant.to_owned(),
        deployment: deployment.to_owned(),
        flow: flow.to_owned(),
    }
}

/// The row a version's schedule makes when nothing was stored before.
fn fresh(tenant: &str, version: u32, schedule: &NewSchedule) -> ScheduleRecord {
    ScheduleRecord {
        tenant: tenant.to_owned(),
        deployment: PAYMENTS.to_owned(),
        flow: schedule.flow.clone(),
        version,
        expression: schedule.expression.clone(),
        zone: schedule.zone.clone(),
        next_at: schedule.next_at,
        last_at: None,
        last_instance: None,
        paused: false,
    }
}

async fn sync<S: Store>(store: &S, tenant: &str, version: u32, schedules: &[NewSchedule]) {
    store
        .sync_schedules(tenant, PAYMENTS, version, schedules)
        .await
        .expect("a sync succeeds");
}

async fn listed<S: Store>(store: &S, tenant: &str) -> Vec<ScheduleRecord> {
    store.schedules(Some(tenant)).await.unwrap()
}

/// The one row of `flow`, of [`TENANT`]'s [`PAYMENTS`].
async fn row<S: Store>(store: &S, flow: &str) -> ScheduleRecord {
    let rows = listed(store, TENANT).await;
    let mut found = rows.iter().filter(|row| row.flow == flow);
    let row = found
        .next()
        .unwrap_or_else(|| panic!("a row of {flow}: {rows:?}"));
    row.clone()
}

/// The keys of the rows due at `now`, in the order the scan gives them.
async fn due<S: Store>(store: &S, now: Timestamp, limit: u32) -> Vec<(String, String)> {
    store
        .due_schedules(now, limit)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.tenant, row.flow))
        .collect()
}

fn owned(tenant: &str, flow: &str) -> (String, String) {
    (tenant.to_owned(), flow.to_owned())
}

/// The scheduler's move of `flow`'s row from `from` to `next_at`, firing `from` as `instance`.
fn fired(from: Timestamp, next_at: Timestamp, instance: &str) -> Advance {
    Advance {
        from,
        next_at,
        fired: Some((from, instance.to_owned())),
    }
}

pub async fn a_synced_schedule_is_listed_and_due_at_its_next_tick<S: Store>(store: &S) {
    let nightly = schedule(NIGHTLY, DAILY_AT_TWO, "Europe/Paris", tick(120));
    let hourly = schedule(HOURLY, EVERY_HOUR, UTC, tick(60));
    sync(store, TENANT, 1, &[nightly.clone(), hourly.clone()]).await;

    assert_eq!(
        listed(store, TENANT).await,
        [fresh(TENANT, 1, &hourly), fresh(TENANT, 1, &nightly)],
        "by deployment and flow"
    );
    let just_before = Timestamp::from_microsecond(tick(60).as_microsecond() - 1).unwrap();
    assert!(due(store, just_before, 10).await.is_empty());
    assert_eq!(due(store, tick(60), 10).await, [owned(TENANT, HOURLY)]);
    assert_eq!(
        due(store, tick(600), 10).await,
        [owned(TENANT, HOURLY), owned(TENANT, NIGHTLY)],
        "the earliest first"
    );
    assert_eq!(
        due(store, tick(600), 1).await,
        [owned(TENANT, HOURLY)],
        "no more than the limit"
    );
    assert_eq!(
        store.due_schedules(tick(60), 10).await.unwrap(),
        [fresh(TENANT, 1, &hourly)],
        "a due row reads back whole"
    );
}

pub async fn a_newer_version_replaces_the_schedule_keeping_paused_and_last_fire<S: Store>(
    store: &S,
) {
    sync(
        store,
        TENANT,
        1,
        &[schedule(NIGHTLY, DAILY_AT_TWO, UTC, tick(120))],
    )
    .await;
    let moved = fired(tick(120), tick(1560), &id(1));
    assert!(
        store
            .advance_schedule(&key(TENANT, PAYMENTS, NIGHTLY), 1, &moved)
            .await
            .unwrap()
    );
    store
        .set_schedule_paused(&key(TENANT, PAYMENTS, NIGHTLY), true)
        .await
        .unwrap()
        .expect("the row is there");

    let at_three = schedule(NIGHTLY, "cron 0 3 * * *", UTC, tick(180));
    sync(store, TENANT, 2, std::slice::from_ref(&at_three)).await;

    assert_eq!(
        row(store, NIGHTLY).await,
        ScheduleRecord {
            last_at: Some(tick(120)),
            last_instance: Some(id(1)),
            paused: true,
            ..fresh(TENANT, 2, &at_three)
        },
        "the new expression starts again at its own next tick; pausing and the last fire stay"
    );

    sync(
        store,
        TENANT,
        2,
        &[schedule(NIGHTLY, DAILY_AT_TWO, UTC, tick(9))],
    )
    .await;
    assert_eq!(
        row(store, NIGHTLY).await.expression,
        "cron 0 3 * * *",
        "syncing the stored version again changes nothing"
    );
}

pub async fn an_unchanged_expression_keeps_next_at_across_versions<S: Store>(store: &S) {
    sync(
        store,
        TENANT,
        1,
        &[schedule(HOURLY, EVERY_HOUR, UTC, tick(60))],
    )
    .await;
    let skipped = Advance {
        from: tick(60),
        next_at: tick(120),
        fired: None,
    };
    assert!(
        store
            .advance_schedule(&key(TENANT, PAYMENTS, HOURLY), 1, &skipped)
            .await
            .unwrap()
    );

    sync(
        store,
        TENANT,
        2,
        &[schedule(HOURLY, EVERY_HOUR, UTC, tick(180))],
    )
    .await;
    let kept = row(store, HOURLY).await;
    assert_eq!(
        (kept.version, kept.next_at, kept.last_at),
        (2, tick(120), None),
        "the schedule goes on where it was; a skipped tick is no fire"
    );

    let elsewhere = schedule(HOURLY, EVERY_HOUR, "Asia/Tokyo", tick(240));
    sync(store, TENANT, 3, std::slice::from_ref(&elsewhere)).await;
    assert_eq!(
        row(store, HOURLY).await,
        fresh(TENANT, 3, &elsewhere),
        "a new zone starts again"
    );
}

/// A replica late to load a version must not bring its predecessor's schedule back: neither over
/// a newer version's rows, nor where the newer version stored schedules nothing.
pub async fn an_older_version_changes_nothing<S: Store>(store: &S) {
    let hourly = schedule(HOURLY, EVERY_HOUR, UTC, tick(60));
    sync(store, TENANT, 2, std::slice::from_ref(&hourly)).await;

    sync(
        store,
        TENANT,
        1,
        &[
            schedule(HOURLY, "every PT5M", UTC, tick(5)),
            schedule(NIGHTLY, DAILY_AT_TWO, UTC, tick(120)),
        ],
    )
    .await;
    assert_eq!(listed(store, TENANT).await, [fresh(TENANT, 2, &hourly)]);

    // Versions 1 and 2 of refunds are stored; version 2 schedules nothing, so it has no rows.
    for source in ["version: one", "version: two"] {
        store.deploy(TENANT, REFUNDS, source).await.unwrap();
    }
    store
        .sync_schedules(TENANT, REFUNDS, 1, std::slice::from_ref(&hourly))
        .await
        .unwrap();
    assert!(
        listed(store, TENANT)
            .await
            .iter()
            .all(|row| row.deployment == PAYMENTS),
        "a newer deployment version is stored"
    );
}

pub async fn a_flow_the_new_version_no_longer_schedules_loses_its_row<S: Store>(store: &S) {
    let hourly = schedule(HOURLY, EVERY_HOUR, UTC, tick(60));
    let nightly = schedule(NIGHTLY, DAILY_AT_TWO, UTC, tick(120));
    sync(store, TENANT, 1, &[hourly.clone(), nightly.clone()]).await;
    store
        .sync_schedules(TENANT, REFUNDS, 1, std::slice::from_ref(&hourly))
        .await
        .unwrap();

    sync(store, TENANT, 2, std::slice::from_ref(&nightly)).await;
    let flows = |rows: Vec<ScheduleRecord>| -> Vec<(String, String, u32)> {
        rows.into_iter()
            .map(|row| (row.deployment, row.flow, row.version))
            .collect()
    };
    assert_eq!(
        flows(listed(store, TENANT).await),
        [
            (PAYMENTS.to_owned(), NIGHTLY.to_owned(), 2),
            (REFUNDS.to_owned(), HOURLY.to_owned(), 1),
        ],
        "another deployment's schedule is its own"
    );

    sync(store, TENANT, 3, &[]).await;
    assert_eq!(
        flows(listed(store, TENANT).await),
        [(REFUNDS.to_owned(), HOURLY.to_owned(), 1)],
        "a version that schedules nothing has no rows"
    );
    assert_eq!(due(store, tick(600), 10).await, [owned(TENANT, HOURLY)]);
}

/// Replicas activating versions of one deployment at once, in any order: the newest version's
/// schedule is what stays, whichever sync lands last.
pub async fn concurrent_syncs_leave_the_newest_versions_schedule<S: Store>(store: &S) {
    let flows = ["flow-1", "flow-2", "flow-3", "flow-4"];
    let version = |n: u32| [schedule(flows[n as usize - 1], EVERY_HOUR, UTC, tick(60))];
    let (v3, v1, v4, v2) = (version(3), version(1), version(4), version(2));

    tokio::join!(
        sync(store, TENANT, 3, &v3),
        sync(store, TENANT, 1, &v1),
        sync(store, TENANT, 4, &v4),
        sync(store, TENANT, 2, &v2),
    );

    assert_eq!(listed(store, TENANT).await, [fresh(TENANT, 4, &v4[0])]);
}

/// Two leaders advancing one tick (a lease handed over mid-pass): both read the row at the same
/// `next_at`, and only the first advance from it writes.
pub async fn an_advance_from_a_stale_next_at_writes_nothing<S: Store>(store: &S) {
    sync(
        store,
        TENANT,
        1,
        &[schedule(HOURLY, EVERY_HOUR, UTC, tick(60))],
    )
    .await;
    let hourly = key(TENANT, PAYMENTS, HOURLY);
    let by_a = fired(tick(60), tick(120), &id(1));
    let by_b = fired(tick(60), tick(120), &id(2));

    let (a, b) = tokio::join!(
        store.advance_schedule(&hourly, 1, &by_a),
        store.advance_schedule(&hourly, 1, &by_b)
    );
    let (a, b) = (a.unwrap(), b.unwrap());

    assert!(a ^ b, "exactly one advance writes: {a} {b}");
    let winner = if a { id(1) } else { id(2) };
    let moved = row(store, HOURLY).await;
    assert_eq!(
        (moved.next_at, moved.last_at, moved.last_instance),
        (tick(120), Some(tick(60)), Some(winner.clone()))
    );

    let stale_version = fired(tick(120), tick(180), &id(3));
    assert!(
        !store
            .advance_schedule(&hourly, 2, &stale_version)
            .await
            .unwrap(),
        "a version the row is not on"
    );
    let skipped = Advance {
        from: tick(120),
        next_at: tick(180),
        fired: None,
    };
    assert!(store.advance_schedule(&hourly, 1, &skipped).await.unwrap());
    let moved = row(store, HOURLY).await;
    assert_eq!(
        (moved.next_at, moved.last_at, moved.last_instance),
        (tick(180), Some(tick(60)), Some(winner)),
        "a skipped tick keeps the last fire"
    );
}

pub async fn a_paused_schedule_is_not_due_and_resumes<S: Store>(store: &S) {
    let hourly = schedule(HOURLY, EVERY_HOUR, UTC, tick(60));
    sync(store, TENANT, 1, std::slice::from_ref(&hourly)).await;
    let key = key(TENANT, PAYMENTS, HOURLY);

    let paused = store.set_schedule_paused(&key, true).await.unwrap();
    assert_eq!(
        paused,
        Some(ScheduleRecord {
            paused: true,
            ..fresh(TENANT, 1, &hourly)
        })
    );
    assert!(due(store, tick(600), 10).await.is_empty());
    assert_eq!(
        listed(store, TENANT).await.len(),
        1,
        "a paused row is listed"
    );

    let resumed = store.set_schedule_paused(&key, false).await.unwrap();
    assert_eq!(resumed, Some(fresh(TENANT, 1, &hourly)));
    assert_eq!(due(store, tick(600), 10).await, [owned(TENANT, HOURLY)]);
}

pub async fn pausing_an_unknown_schedule_answers_none<S: Store>(store: &S) {
    sync(
        store,
        TENANT,
        1,
        &[schedule(HOURLY, EVERY_HOUR, UTC, tick(60))],
    )
    .await;

    for unknown in [
        key(TENANT, PAYMENTS, NIGHTLY),
        key(TENANT, REFUNDS, HOURLY),
        key(OTHER_TENANT, PAYMENTS, HOURLY),
    ] {
        assert_eq!(
            store.set_schedule_paused(&unknown, true).await.unwrap(),
            None,
            "{unknown:?}"
        );
    }
    assert!(!row(store, HOURLY).await.paused);
}

pub async fn schedules_are_tenant_scoped<S: Store>(store: &S) {
    let mine = schedule(HOURLY, EVERY_HOUR, UTC, tick(60));
    let theirs = schedule(HOURLY, EVERY_HOUR, UTC, tick(30));
    sync(store, TENANT, 1, std::slice::from_ref(&mine)).await;
    sync(store, OTHER_TENANT, 5, std::slice::from_ref(&theirs)).await;

    assert_eq!(listed(store, TENANT).await, [fresh(TENANT, 1, &mine)]);
    assert_eq!(
        listed(store, OTHER_TENANT).await,
        [fresh(OTHER_TENANT, 5, &theirs)]
    );
    assert_eq!(
        store.schedules(None).await.unwrap(),
        [fresh(TENANT, 1, &mine), fresh(OTHER_TENANT, 5, &theirs)],
        "every tenant's, by tenant"
    );
    assert_eq!(
        due(store, tick(600), 10).await,
        [owned(OTHER_TENANT, HOURLY), owned(TENANT, HOURLY)],
        "the due scan reads every tenant's"
    );

    store
        .set_schedule_paused(&key(TENANT, PAYMENTS, HOURLY), true)
        .await
        .unwrap();
    sync(store, TENANT, 2, &[]).await;
    assert!(listed(store, TENANT).await.is_empty());
    assert_eq!(
        store.schedules(None).await.unwrap(),
        [fresh(OTHER_TENANT, 5, &theirs)],
        "one tenant's pause and sync leave another's row alone"
    );
}
