//! Calls on PostgreSQL: a fan-out of children costs no statement per child. The step's calls are
//! CTEs of its one statement, fed by arrays (`unnest`); shown here by statement-level triggers on
//! `INSERT`, which fire per statement whatever its number of rows (once per table, however many
//! of its CTEs insert there) — so a loop of one insert per child would show as many more.

use serde_json::json;
use sqlx::{Connection, PgConnection};
use sutra_core::snapshot::{InstanceInfo, ParkId, ParkSort, Snapshot};
use sutra_core::step::{Disarm, Message};
use sutra_store::prelude::*;
use sutra_store::{InstanceFilter, NewChild, StepCommit};
use sutra_testkit::postgres::TestDatabase;

use crate::common::{TENANT, arming, claimed, replica, started};

/// An admin connection to `database`, on which every `INSERT` into `instances` or `deliveries`
/// from here on counts one.
async fn counting_inserts(database: &TestDatabase) -> PgConnection {
    let mut admin = PgConnection::connect(database.admin_url()).await.unwrap();
    for statement in [
        "CREATE SEQUENCE public.inserts_seen",
        "CREATE FUNCTION public.count_insert() RETURNS trigger LANGUAGE plpgsql
         SECURITY DEFINER SET search_path = public
         AS $$ BEGIN PERFORM nextval('inserts_seen'); RETURN NULL; END $$",
        "CREATE TRIGGER count_insert AFTER INSERT ON instances
         FOR EACH STATEMENT EXECUTE FUNCTION public.count_insert()",
        "CREATE TRIGGER count_insert AFTER INSERT ON deliveries
         FOR EACH STATEMENT EXECUTE FUNCTION public.count_insert()",
    ] {
        sqlx::query(statement).execute(&mut admin).await.unwrap();
    }
    admin
}

async fn inserts(admin: &mut PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM public.inserts_seen",
    )
    .fetch_one(admin)
    .await
    .unwrap()
}

/// The `n`th child of `parent`, waited for at park `n + 1`.
fn child(parent: &str, n: u64) -> NewChild {
    let id = format!("{parent}-child-{n:04}");
    NewChild {
        snapshot: Snapshot::new(InstanceInfo {
            id: id.clone(),
            tenant: TENANT.to_owned(),
            deployment: "payments".to_owned(),
            version: 1,
            flow: "refund".to_owned(),
            parent: None,
        }),
        park: ParkId(n + 1),
        start: Message {
            id: format!("call:{parent}:{}", n + 1),
            kind: "sutra.call".to_owned(),
            source: format!("/instances/{parent}"),
            subject: None,
            time: None,
            data: json!({ "item": n }),
        },
    }
}

#[tokio::test]
async fn a_thousand_children_cost_the_statements_ten_do() {
    let database = TestDatabase::create().await;
    let store = replica(&database).await;
    let mut admin = counting_inserts(&database).await;

    let mut costs = Vec::new();
    for count in [10, 1_000] {
        let parent = format!("parent-{count}");
        started(&store, TENANT, &parent).await;
        let claim = claimed(&store, TENANT, &parent).await;
        let calling = StepCommit {
            children: (0..count).map(|n| child(&parent, n)).collect(),
            ..arming(&claim, Vec::new())
        };
        let before = inserts(&mut admin).await;
        let called = store.commit(&calling).await.unwrap();
        let calls = inserts(&mut admin).await - before;

        let claim = claimed(&store, TENANT, &parent).await;
        let disarms = (0..count).map(|n| Disarm {
            park: ParkId(n + 1),
            sort: ParkSort::Call,
        });
        let cancelling = StepCommit {
            disarms: disarms.collect(),
            ..arming(&claim, Vec::new())
        };
        let before = inserts(&mut admin).await;
        let cancelled = store.commit(&cancelling).await.unwrap();
        costs.push((calls, inserts(&mut admin).await - before));

        let every = usize::try_from(count).unwrap();
        assert_eq!(called.due_now.len(), every, "a start per child");
        assert_eq!(cancelled.due_now.len(), every, "a cancel per child");
        let children = InstanceFilter {
            parent: Some(parent.clone()),
            ..InstanceFilter::default()
        };
        assert_eq!(
            (store
                .instance_summaries(TENANT, &children, false)
                .await
                .unwrap())
            .len(),
            every
        );
    }
    // The triggers do fire: the children and their starts are two inserts at least.
    assert!(costs[0].0 >= 2 && costs[0].1 >= 1, "{costs:?}");
    assert_eq!(costs[0], costs[1], "10 and 1,000 children: {costs:?}");
}
