//! The schema: versioned migrations applied once however many replicas start at once, by the
//! role that owns the schema and never by the role replicas serve as, and the shape every table
//! must keep — a tenant column and forced row-level security.

use sqlx::{Connection, PgConnection};
use sutra_store::prelude::*;
use sutra_store::{Error, InstanceFilter};
use sutra_store_postgres::{PostgresOptions, migrate, row_security_gaps};
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

    migrate(database.owner_url()).await.unwrap();
    migrate(database.owner_url()).await.unwrap();
    // The serving role may not change the schema, and finds nothing to change.
    migrate(database.url()).await.unwrap();
    let reopened = replica(&database).await;

    assert_eq!(applied(&database).await, migrations);
    assert!(reopened.instance(TENANT, "i-1").await.unwrap().is_some());
}

/// Replicas that migrate at start through the owner's URL (`sutra.store.migrate-url`) and serve
/// as the engine's role.
fn migrating_as_owner(database: &TestDatabase) -> PostgresOptions {
    PostgresOptions {
        migrate_url: Some(database.owner_url().to_owned()),
        ..PostgresOptions::default()
    }
}

#[tokio::test]
async fn replicas_starting_together_apply_each_migration_once() {
    let database = TestDatabase::empty().await;
    let options = migrating_as_owner(&database);

    let opened = futures_util::future::join_all(
        (0..4).map(|_| sutra_store_postgres::open(database.url(), &options)),
    )
    .await;

    assert!(opened.iter().all(Result::is_ok));
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
    let database = TestDatabase::empty().await;
    let unmigrated = PostgresOptions {
        migrate: false,
        ..PostgresOptions::default()
    };
    let early = sutra_store_postgres::open(database.url(), &unmigrated)
        .await
        .unwrap();
    let before = early
        .instance_summaries(TENANT, &InstanceFilter::default(), false)
        .await;
    assert!(
        matches!(before, Err(Error::Corrupt(_))),
        "no schema yet: {before:?}"
    );

    migrate(database.owner_url()).await.unwrap();

    let store = sutra_store_postgres::open(database.url(), &unmigrated)
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
        // A tenant's read, insert, update and delete, and the system's read, update and delete
        // (decision 0040); leases are the system's alone, all four.
        let expected = if table == "leases" { 4 } else { 7 };
        assert!(
            enabled && forced && has_tenant && policies == expected,
            "{table}: rls {enabled}, forced {forced}, tenant {has_tenant}, policies {policies}"
        );
    }
}

/// A policy naming `sutra_tenant()` bare has it evaluated for every row a scan filters; inside
/// `(SELECT …)` it is an init plan, evaluated once per statement (migration 0016, decision 0064).
#[tokio::test]
async fn every_policy_asks_for_the_tenant_once_per_statement() {
    let database = TestDatabase::create().await;
    replica(&database).await;

    let policies: Vec<(String, String, Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT tablename::text, policyname::text, qual, with_check FROM pg_policies
         WHERE schemaname = 'public' ORDER BY tablename, policyname",
    )
    .fetch_all(&mut admin(&database).await)
    .await
    .unwrap();

    assert!(policies.len() >= 9 * 7, "{policies:?}");
    for (table, policy, using, check) in policies {
        for expression in [using, check].into_iter().flatten() {
            let named = expression.matches("sutra_tenant()").count();
            let asked_once = expression.matches("SELECT sutra_tenant()").count();
            assert!(
                named > 0 && named == asked_once,
                "{table}.{policy} names the tenant per row: {expression}"
            );
        }
    }
}

#[tokio::test]
async fn a_url_that_is_not_postgres_is_refused() {
    let outcome =
        sutra_store_postgres::open("mysql://nowhere/db", &PostgresOptions::default()).await;
    assert!(matches!(outcome, Err(Error::Unavailable(_))));
    assert!(matches!(
        migrate("postgres://127.0.0.1:1/none").await,
        Err(Error::Unavailable(_))
    ));
}

#[tokio::test]
async fn a_serving_role_that_finds_migrations_pending_is_told_to_migrate_as_the_owner() {
    let database = TestDatabase::empty().await;

    let refused = sutra_store_postgres::open(database.url(), &PostgresOptions::default()).await;

    match refused {
        Err(Error::Unavailable(reason)) => assert!(
            reason.contains("sutra_engine may not change the schema")
                && reason.contains("sutra db migrate")
                && reason.contains("sutra.store.migrate-url"),
            "{reason}"
        ),
        other => panic!("expected a refusal naming the fix: {:?}", other.err()),
    }
    sutra_store_postgres::open(database.url(), &migrating_as_owner(&database))
        .await
        .expect("with the owner's URL to migrate through, it opens");
}

#[tokio::test]
async fn only_a_role_that_owns_the_tables_is_reported_able_to_switch_row_security_off() {
    let database = TestDatabase::create().await;

    let serving = row_security_gaps(database.url()).await.unwrap();
    let owning = row_security_gaps(database.owner_url()).await.unwrap();
    let admin = row_security_gaps(database.admin_url()).await.unwrap();

    assert_eq!(serving, Vec::<String>::new());
    assert!(
        owning.len() == 1 && owning[0].contains("owns the tables"),
        "{owning:?}"
    );
    assert!(
        admin.iter().any(|gap| gap.contains("superuser")),
        "{admin:?}"
    );
}

#[tokio::test]
async fn the_serving_role_may_read_and_write_rows_and_nothing_more() {
    let database = TestDatabase::create().await;
    let mut engine = PgConnection::connect(database.url()).await.unwrap();

    let refused = [
        "ALTER TABLE instances DISABLE ROW LEVEL SECURITY",
        "ALTER TABLE instances NO FORCE ROW LEVEL SECURITY",
        "DROP POLICY tenant_reads ON instances",
        "TRUNCATE instances CASCADE",
        "CREATE TABLE smuggled (tenant text)",
        "SET ROLE sutra_owner",
        "DELETE FROM _sqlx_migrations",
    ];
    for statement in refused {
        let outcome = sqlx::query(statement).execute(&mut engine).await;
        let code = outcome.err().and_then(|e| {
            e.as_database_error()
                .and_then(|e| e.code())
                .map(|c| c.into_owned())
        });
        assert_eq!(code.as_deref(), Some("42501"), "{statement}");
    }
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&mut engine)
        .await
        .unwrap();
    assert!(applied > 0, "it reads which migrations are applied");
}
