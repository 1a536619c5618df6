//! The schema: versioned migrations applied once however many replicas start at once, and the
//! shape every table must keep — a tenant column and forced row-level security.

use sqlx::{Connection, PgConnection};
use sutra_store::{Error, InstanceFilter, Store};
use sutra_store_postgres::{PostgresOptions, PostgresStore, migrate};
use sutra_testkit::postgres::TestDatabase;

use crate::common::{TENANT, replica, started};

async fn admin(database: &TestDatabase) -> PgConnection {
    PgConnection::connect(database.admin_url())
        .await
        .expect("the admin connects")
}

/// How many migrations the database records as applied.
async fn applied(database: &TestDatabase) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut admin(database).await)
        .await
        .unwrap()
}

#[tokio::test]
async fn migrating_again_changes_nothing_and_keeps_every_row() {
    let database = TestDatabase::create().await;
    let store = replica(&database).await;
    started(&store, TENANT, "i-1").await;
    let migrations = applied(&database).await;
    assert!(migrations > 0);

    migrate(database.url()).await.unwrap();
    migrate(database.url()).await.unwrap();
    let reopened = replica(&database).await;

    assert_eq!(applied(&database).await, migrations);
    assert!(reopened.instance(TENANT, "i-1").await.unwrap().is_some());
}

#[tokio::test]
async fn replicas_starting_together_apply_each_migration_once() {
    let database = TestDatabase::create().await;

    let opened = futures_util::future::join_all((0..4).map(|_| replica(&database))).await;

    assert_eq!(opened.len(), 4);
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&mut admin(&database).await)
        .await
        .unwrap();
    assert_eq!(
        count,
        applied(&database).await,
        "no failed or repeated migration"
    );
}

#[tokio::test]
async fn a_store_that_does_not_migrate_works_on_the_schema_migrate_made() {
    let database = TestDatabase::create().await;
    let unmigrated = PostgresOptions {
        migrate: false,
        ..PostgresOptions::default()
    };
    let early = PostgresStore::open(database.url(), &unmigrated)
        .await
        .unwrap();
    let before = early.instances(TENANT, &InstanceFilter::default()).await;
    assert!(
        matches!(before, Err(Error::Corrupt(_))),
        "no schema yet: {before:?}"
    );

    migrate(database.url()).await.unwrap();

    let store = PostgresStore::open(database.url(), &unmigrated)
        .await
        .unwrap();
    started(&store, TENANT, "i-1").await;
    assert!(store.instance(TENANT, "i-1").await.unwrap().is_some());
}

#[tokio::test]
async fn every_table_carries_a_tenant_and_forces_row_security() {
    let database = TestDatabase::create().await;
    replica(&database).await;

    let tables: Vec<(String, bool, bool, bool, i64)> = sqlx::query_as(
        "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity,
                EXISTS (SELECT 1 FROM pg_attribute a
                        WHERE a.attrelid = c.oid AND a.attname = 'tenant' AND NOT a.attisdropped),
                (SELECT count(*) FROM pg_policy p WHERE p.polrelid = c.oid)
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = 'public' AND c.relkind = 'r' AND c.relname <> '_sqlx_migrations'
         ORDER BY c.relname",
    )
    .fetch_all(&mut admin(&database).await)
    .await
    .unwrap();

    assert!(tables.len() >= 9, "{tables:?}");
    for (table, enabled, forced, has_tenant, policies) in tables {
        assert!(
            enabled && forced && has_tenant && policies == 4,
            "{table}: rls {enabled}, forced {forced}, tenant {has_tenant}, policies {policies}"
        );
    }
}

#[tokio::test]
async fn a_url_that_is_not_postgres_is_refused() {
    let outcome = PostgresStore::open("mysql://nowhere/db", &PostgresOptions::default()).await;
    assert!(matches!(outcome, Err(Error::Unavailable(_))));
    assert!(matches!(
        migrate("postgres://127.0.0.1:1/none").await,
        Err(Error::Unavailable(_))
    ));
}
