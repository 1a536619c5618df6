//! Races that SQLite's single writer rules out and PostgreSQL does not: several replicas, each
//! with its own pool, doing the same thing at the same moment on separate connections. Each
//! test repeats its race many times in one go, so that an interleaving that breaks the
//! invariant has many chances to show.

use std::collections::HashSet;

use std::time::Duration;

use futures_util::future::join_all;
use sqlx::{Connection, PgConnection};
use sutra_core::snapshot::{ParkId, ParkSort};
use sutra_core::step::Disarm;
use sutra_store::prelude::*;
use sutra_store::{DeliveryKind, Error, StepCommit, TaskPoll};
use sutra_store_postgres::{PostgresOptions, PostgresStore};
use sutra_testkit::postgres::TestDatabase;

use crate::common::{
    HOUR, TENANT, TOPIC, arming, claimed, early, emit, owner, started, task, wait,
};

/// Replicas with pools large enough that every racer has a connection of its own.
async fn replicas(database: &TestDatabase, count: usize) -> Vec<PostgresStore> {
    let options = PostgresOptions {
        pool_size: 16,
        ..PostgresOptions::default()
    };
    let mut replicas = Vec::with_capacity(count);
    for _ in 0..count {
        let store = sutra_store_postgres::open(database.url(), &options)
            .await
            .unwrap();
        replicas.push(store);
    }
    replicas
}

fn id(n: usize) -> String {
    format!("0190c0de-0000-7000-8000-{n:012}")
}

/// A step in flight on another replica holds the instance's row lock until its commit. The claim
/// must refuse at once rather than queue behind that transaction: the holder keeps the row until
/// the claim has answered, and fails the test the moment it sees the claimant waiting for a lock.
/// (Without `SKIP LOCKED` the claim would wait out `lock_timeout` and only then be refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_never_waits_on_a_step_in_flight() {
    let database = TestDatabase::create().await;
    let store = crate::common::replica(&database).await;
    let instance = id(1);
    started(&store, TENANT, &instance).await;

    let mut holder = PgConnection::connect(database.url()).await.unwrap();
    let mut step = holder.begin().await.unwrap();
    sqlx::query("SELECT set_config('sutra.tenant', $1, true)")
        .bind(TENANT)
        .execute(&mut *step)
        .await
        .unwrap();
    sqlx::query("SELECT 1 FROM instances WHERE tenant = $1 AND id = $2 FOR NO KEY UPDATE")
        .bind(TENANT)
        .bind(&instance)
        .execute(&mut *step)
        .await
        .unwrap();

    let mut watcher = PgConnection::connect(database.url()).await.unwrap();
    let claim = {
        let instance = instance.clone();
        tokio::spawn(async move {
            let outcome = store
                .claim(TENANT, &instance, &owner("replica-b/lane-0"), HOUR)
                .await;
            (outcome, store)
        })
    };
    tokio::pin!(claim);
    let (outcome, store) = loop {
        tokio::select! {
            joined = &mut claim => break joined.unwrap(),
            () = tokio::time::sleep(Duration::from_millis(5)) => {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity
                     WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_one(&mut watcher)
                .await
                .unwrap();
                assert_eq!(waiting, 0, "the claim waited for the row lock of a step in flight");
            }
        }
    };

    assert_eq!(outcome, Err(Error::ClaimHeld));
    step.rollback().await.unwrap();
    let record = store.instance(TENANT, &instance).await.unwrap().unwrap();
    assert_eq!(record.owner, None, "a refusal writes nothing");
    assert!(
        store
            .claim(TENANT, &instance, &owner("replica-b/lane-0"), HOUR)
            .await
            .is_ok(),
        "once the step has committed (here: rolled back), the claim is taken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_one_claimant_across_replicas_wins_every_round() {
    const ROUNDS: usize = 60;
    let database = TestDatabase::create().await;
    let replicas = replicas(&database, 3).await;
    for round in 0..ROUNDS {
        started(&replicas[0], TENANT, &id(round)).await;
    }

    for round in 0..ROUNDS {
        let instance = id(round);
        let claims = replicas.iter().enumerate().flat_map(|(r, store)| {
            let instance = &instance;
            (0..3).map(move |lane| async move {
                let who = owner(&format!("replica-{r}/lane-{lane}"));
                store.claim(TENANT, instance, &who, HOUR).await
            })
        });
        let outcomes = join_all(claims).await;

        let winners = outcomes.iter().filter(|outcome| outcome.is_ok()).count();
        let refused = outcomes
            .iter()
            .filter(|outcome| **outcome == Err(Error::ClaimHeld))
            .count();
        assert_eq!(
            (winners, refused),
            (1, outcomes.len() - 1),
            "round {round}: {outcomes:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_early_message_is_never_lost_to_a_concurrent_park() {
    const PAIRS: usize = 30;
    let database = TestDatabase::create().await;
    let [parker, intake] = <[PostgresStore; 2]>::try_from(replicas(&database, 2).await)
        .unwrap_or_else(|_| unreachable!("two replicas"));
    let mut claims = Vec::with_capacity(PAIRS);
    for n in 0..PAIRS {
        started(&parker, TENANT, &id(n)).await;
        claims.push(claimed(&parker, TENANT, &id(n)).await);
    }

    // Each pair at once: the park of instance n on key n, and a message for key n arriving at
    // an intake that looked for a wait and found none.
    let pairs = claims.iter().enumerate().map(|(n, claim)| {
        let (parker, intake) = (&parker, &intake);
        async move {
            let parking = arming(claim, vec![wait(1, &format!("key-{n}"))]);
            let message = early(&format!("reply-{n}"), &format!("key-{n}"));
            let (parked, buffered) =
                tokio::join!(parker.commit(&parking), intake.buffer(TENANT, &message));
            parked.expect("the park commits");
            assert_eq!(buffered.expect("the message is kept"), None);
        }
    });
    join_all(pairs).await;

    // Whichever went first, the message became exactly one relay to its park.
    let relays = parker.due_deliveries(1000, HOUR).await.unwrap();
    let mut relayed: Vec<String> = relays
        .iter()
        .filter(|delivery| {
            delivery.park == ParkId(1) && matches!(delivery.kind, DeliveryKind::Relay { .. })
        })
        .map(|delivery| delivery.instance.clone())
        .collect();
    relayed.sort();
    let every_instance: Vec<String> = (0..PAIRS).map(id).collect();
    assert_eq!(relayed, every_instance, "one relay per early message");
    for n in 0..PAIRS {
        let again = claimed(&parker, TENANT, &id(n)).await;
        let repark = StepCommit {
            disarms: vec![Disarm {
                park: ParkId(1),
                sort: ParkSort::Receive,
            }],
            ..arming(&again, vec![wait(2, &format!("key-{n}"))])
        };
        let committed = parker.commit(&repark).await.unwrap();
        assert!(committed.due_now.is_empty(), "nothing was left buffered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_pollers_never_share_a_task() {
    const TASKS: usize = 40;
    let database = TestDatabase::create().await;
    let replicas = replicas(&database, 3).await;
    for n in 0..TASKS {
        started(&replicas[0], TENANT, &id(n)).await;
        let claim = claimed(&replicas[0], TENANT, &id(n)).await;
        replicas[0]
            .commit(&arming(&claim, vec![task(1)]))
            .await
            .unwrap();
    }

    // Three pollers per replica, each polling two at a time until nothing is left.
    let pollers = replicas.iter().enumerate().flat_map(|(r, store)| {
        (0..3).map(move |w| async move {
            let poll = TaskPoll {
                tenant: TENANT.to_owned(),
                worker: format!("worker-{r}-{w}"),
                topics: vec![TOPIC.to_owned()],
                max: 2,
                lock: Some(HOUR),
            };
            let mut taken = Vec::new();
            loop {
                let polled = store.poll_tasks(&poll).await.unwrap().tasks;
                if polled.is_empty() {
                    return taken;
                }
                taken.extend(polled.into_iter().map(|task| task.id));
            }
        })
    });
    let taken: Vec<String> = join_all(pollers).await.into_iter().flatten().collect();

    let distinct: HashSet<&String> = taken.iter().collect();
    assert_eq!(distinct.len(), taken.len(), "a task went to two pollers");
    assert_eq!(taken.len(), TASKS, "every task was handed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_senders_never_share_an_outbox_row() {
    const INSTANCES: usize = 6;
    const EMITS: u32 = 10;
    let database = TestDatabase::create().await;
    let replicas = replicas(&database, 3).await;
    for n in 0..INSTANCES {
        started(&replicas[0], TENANT, &id(n)).await;
        let claim = claimed(&replicas[0], TENANT, &id(n)).await;
        let emitting = StepCommit {
            outbox: (0..EMITS).map(|e| emit(&id(n), e)).collect(),
            ..arming(&claim, Vec::new())
        };
        replicas[0].commit(&emitting).await.unwrap();
    }

    let senders = replicas.iter().flat_map(|store| {
        (0..3).map(move |_| async move {
            let mut claimed = Vec::new();
            loop {
                let batch = store.claim_outbox(3, HOUR).await.unwrap();
                if batch.is_empty() {
                    return claimed;
                }
                claimed.extend(batch.into_iter().map(|row| row.id));
            }
        })
    });
    let claimed: Vec<_> = join_all(senders).await.into_iter().flatten().collect();

    let distinct: HashSet<_> = claimed.iter().collect();
    assert_eq!(distinct.len(), claimed.len(), "a row went to two senders");
    assert_eq!(claimed.len(), INSTANCES * EMITS as usize);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_deploys_of_one_name_get_one_version_each() {
    const DEPLOYS: usize = 12;
    let database = TestDatabase::create().await;
    let replicas = replicas(&database, 3).await;

    let deploys = (0..DEPLOYS).map(|n| {
        let store = &replicas[n % replicas.len()];
        async move { store.deploy(TENANT, "payments", &format!("v: {n}")).await }
    });
    let deployed = join_all(deploys).await;

    let mut versions: Vec<u32> = deployed
        .into_iter()
        .map(|record| record.expect("every deploy lands").version)
        .collect();
    versions.sort_unstable();
    let expected: Vec<u32> = (1..=DEPLOYS as u32).collect();
    assert_eq!(versions, expected);
    let records = replicas[0].deployments(Some(TENANT)).await.unwrap();
    let active: Vec<u32> = records
        .iter()
        .filter(|record| record.status == sutra_store::DeploymentStatus::Active)
        .map(|record| record.version)
        .collect();
    assert_eq!(active, [DEPLOYS as u32], "only the last version is active");
}
