//! The scaling counts at volume (decision 0057): past 100,000 instances the live statuses are
//! still exact, the terminal ones an estimate from the table's size and a sample of its pages.

use sqlx::{Connection, PgConnection};
use sutra_core::snapshot::Status;
use sutra_store::Scaling;
use sutra_testkit::postgres::TestDatabase;

use crate::common::replica;

/// `count` instances of `status` from number `first`, written past row-level security.
async fn instances(connection: &mut PgConnection, first: i64, count: i64, status: &str) {
    sqlx::query(
        "INSERT INTO instances (id, tenant, deployment, version, flow, status, snapshot,
             created_at, updated_at)
         SELECT 'i-' || n, 'acme', 'd', 1, 'f',
             -- One in twelve cancelled, spread over every page as time spreads them.
             CASE WHEN $3 = 'completed' AND n % 12 = 0 THEN 'cancelled' ELSE $3 END,
             '{}', 0, 0
         FROM generate_series($1::bigint, $1::bigint + $2::bigint - 1) AS n",
    )
    .bind(first)
    .bind(count)
    .bind(status)
    .execute(connection)
    .await
    .unwrap();
}

fn count(counts: &[(Status, u64)], status: Status) -> u64 {
    counts
        .iter()
        .find(|(counted, _)| *counted == status)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test]
async fn past_a_hundred_thousand_instances_the_terminal_counts_are_estimated() {
    let database = TestDatabase::create().await;
    let store = replica(&database).await;
    let mut admin = PgConnection::connect(database.admin_url()).await.unwrap();
    instances(&mut admin, 0, 120_000, "completed").await;
    instances(&mut admin, 200_000, 300, "suspended").await;
    instances(&mut admin, 300_000, 20, "failed").await;
    instances(&mut admin, 400_000, 1, "created").await;
    sqlx::query("ANALYZE instances")
        .execute(&mut admin)
        .await
        .unwrap();
    let rows: f32 =
        sqlx::query_scalar("SELECT reltuples FROM pg_class WHERE relname = 'instances'")
            .fetch_one(&mut admin)
            .await
            .unwrap();

    let counts = store.backlog(None).await.unwrap().instances;

    assert_eq!(count(&counts, Status::Suspended), 300);
    assert_eq!(count(&counts, Status::Failed), 20);
    assert_eq!(count(&counts, Status::Created), 1);
    let (completed, cancelled) = (
        count(&counts, Status::Completed),
        count(&counts, Status::Cancelled),
    );
    // The table's rows as ANALYZE estimated them, less the live ones, split as sampled: 10,000
    // of 120,000 are cancelled, and the sample's share is far closer than a quarter to that.
    assert_eq!(completed + cancelled, rows.round() as u64 - 321);
    assert!((7_500..12_500).contains(&cancelled), "{counts:?}");
}
