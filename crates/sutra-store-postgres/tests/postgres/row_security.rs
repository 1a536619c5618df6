//! Row-level security against raw SQL: what a query made over the engine's own connection
//! settings can see and change, whatever it asks for — the backstop behind every `WHERE tenant =`
//! in the store.
//!
//! Each test writes rows of every table for two tenants through the store, then connects as the
//! engine's role (the store's URL) and queries the tables directly.

use sqlx::{Connection, PgConnection};
use sutra_core::snapshot::ParkId;
use sutra_store::prelude::*;
use sutra_store::{Lookup, NewDelivery, StepCommit};
use sutra_store_postgres::PostgresStore;
use sutra_testkit::postgres::TestDatabase;

use crate::common::{
    OTHER_TENANT, REPLIES, TENANT, arming, claimed, early, emit, replica, started, task, wait,
};

const TABLES: [&str; 10] = [
    "deployments",
    "instances",
    "waits",
    "deliveries",
    "tasks",
    "inbox",
    "buffered",
    "outbox",
    "history",
    "schedules",
];

/// Writes at least one row of every table for `tenant`, on instance `id`.
async fn populate(store: &PostgresStore, tenant: &str, id: &str) {
    store
        .deploy(tenant, "payments", "name: payments")
        .await
        .unwrap();
    started(store, tenant, id).await;
    let claim = claimed(store, tenant, id).await;
    let step = StepCommit {
        outbox: vec![emit(id, 2)],
        ..arming(&claim, vec![wait(1, id), task(2)])
    };
    store.commit(&step).await.unwrap();
    let asked = NewDelivery {
        tenant: tenant.to_owned(),
        instance: id.to_owned(),
        park: ParkId(1),
        kind: sutra_store::DeliveryKind::Timer,
        due_at: jiff::Timestamp::now(),
    };
    store.ask(&asked).await.unwrap();
    store
        .buffer(tenant, &early(&format!("early-{id}"), "nobody-waits"))
        .await
        .unwrap();
    let nightly = sutra_store::NewSchedule {
        flow: "nightly".to_owned(),
        expression: "cron 0 2 * * *".to_owned(),
        zone: "UTC".to_owned(),
        next_at: jiff::Timestamp::now(),
    };
    store
        .sync_schedules(tenant, "payments", 1, &[nightly])
        .await
        .unwrap();
}

async fn two_tenants() -> (TestDatabase, PostgresStore) {
    let database = TestDatabase::create().await;
    let store = replica(&database).await;
    populate(&store, TENANT, "i-acme").await;
    populate(&store, OTHER_TENANT, "i-globex").await;
    (database, store)
}

/// A connection as the engine's role, with nothing declared.
async fn engine_connection(database: &TestDatabase) -> PgConnection {
    PgConnection::connect(database.url()).await.unwrap()
}

/// Begins a transaction acting for `tenant`, as the store declares it.
async fn act_for(connection: &mut PgConnection, tenant: &str) {
    sqlx::query("BEGIN")
        .execute(&mut *connection)
        .await
        .unwrap();
    sqlx::query("SELECT set_config('sutra.tenant', $1, true)")
        .bind(tenant)
        .execute(&mut *connection)
        .await
        .unwrap();
}

async fn count(connection: &mut PgConnection, sql: String) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
        .fetch_one(connection)
        .await
        .unwrap()
}

/// Rows a statement touched, or the SQLSTATE it was refused with.
async fn outcome(connection: &mut PgConnection, sql: String) -> Result<u64, String> {
    sqlx::query("SAVEPOINT attempt")
        .execute(&mut *connection)
        .await
        .unwrap();
    let done = sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(&mut *connection)
        .await;
    let rollback = "ROLLBACK TO SAVEPOINT attempt";
    sqlx::query(rollback)
        .execute(&mut *connection)
        .await
        .unwrap();
    done.map(|result| result.rows_affected()).map_err(|e| {
        e.as_database_error()
            .and_then(|e| e.code())
            .map_or_else(|| e.to_string(), |code| code.into_owned())
    })
}

/// How many rows of each table the admin (a superuser, past row-level security) sees for each
/// tenant.
async fn census(database: &TestDatabase) -> Vec<(String, i64, i64)> {
    let mut admin = PgConnection::connect(database.admin_url()).await.unwrap();
    let mut rows = Vec::new();
    for table in TABLES {
        let sql = format!(
            "SELECT count(*) FILTER (WHERE tenant = '{TENANT}') * 1000
                    + count(*) FILTER (WHERE tenant = '{OTHER_TENANT}') FROM {table}"
        );
        let both = count(&mut admin, sql).await;
        rows.push((table.to_owned(), both / 1000, both % 1000));
    }
    rows
}

#[tokio::test]
async fn a_tenants_transaction_cannot_read_or_change_another_tenants_rows() {
    let (database, _store) = two_tenants().await;
    let before = census(&database).await;
    assert!(
        before
            .iter()
            .all(|(_, mine, theirs)| *mine > 0 && *theirs > 0),
        "every table has rows of both tenants: {before:?}"
    );
    let mut connection = engine_connection(&database).await;
    act_for(&mut connection, TENANT).await;

    for table in TABLES {
        let theirs = format!("tenant = '{OTHER_TENANT}'");
        let seen = count(
            &mut connection,
            format!("SELECT count(*) FROM {table} WHERE {theirs}"),
        );
        assert_eq!(seen.await, 0, "{table}: read");
        let all = count(&mut connection, format!("SELECT count(*) FROM {table}")).await;
        assert!(all > 0, "{table}: the tenant's own rows are visible");
        let update = format!("UPDATE {table} SET tenant = tenant WHERE {theirs}");
        assert_eq!(
            outcome(&mut connection, update).await,
            Ok(0),
            "{table}: update"
        );
        let delete = format!("DELETE FROM {table} WHERE {theirs}");
        assert_eq!(
            outcome(&mut connection, delete).await,
            Ok(0),
            "{table}: delete"
        );
        let steal = format!("UPDATE {table} SET tenant = '{OTHER_TENANT}'");
        assert_eq!(
            outcome(&mut connection, steal).await,
            Err("42501".to_owned()),
            "{table}: moving a row to the other tenant is refused"
        );
    }
    sqlx::query("COMMIT")
        .execute(&mut connection)
        .await
        .unwrap();

    assert_eq!(
        census(&database).await,
        before,
        "nothing of either tenant changed"
    );
}

#[tokio::test]
async fn rows_written_for_another_tenant_are_refused() {
    let (database, _store) = two_tenants().await;
    let mut connection = engine_connection(&database).await;
    act_for(&mut connection, TENANT).await;

    let forged = [
        format!("INSERT INTO deployments VALUES ('{OTHER_TENANT}', 'forged', 9, 'active', '', 0)"),
        format!("INSERT INTO inbox VALUES ('{OTHER_TENANT}', 'c', 'forged', NULL, 'buffered', 0)"),
        format!(
            "INSERT INTO history VALUES ('{OTHER_TENANT}', 'i-globex', 99, 0, 'started', NULL,
                                         NULL, '{{}}')"
        ),
        format!(
            "INSERT INTO schedules (tenant, deployment, flow, version, expression, zone, next_at)
             VALUES ('{OTHER_TENANT}', 'forged', 'f', 1, 'every PT1M', 'UTC', 0)"
        ),
    ];
    for insert in forged {
        assert_eq!(
            outcome(&mut connection, insert.clone()).await,
            Err("42501".to_owned()),
            "{insert}"
        );
    }
    let own = format!("INSERT INTO inbox VALUES ('{TENANT}', 'c', 'own', NULL, 'buffered', 0)");
    assert_eq!(
        outcome(&mut connection, own).await,
        Ok(1),
        "its own rows are writable"
    );
}

#[tokio::test]
async fn without_a_declared_tenant_no_row_is_visible() {
    let (database, _store) = two_tenants().await;
    let mut connection = engine_connection(&database).await;

    for table in TABLES {
        let all = count(&mut connection, format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(all, 0, "{table}: never declared");
        let delete = format!("DELETE FROM {table}");
        assert_eq!(outcome_outside(&mut connection, delete).await, 0, "{table}");
    }
    // A transaction that declared a tenant leaves nothing behind on the connection: the pool
    // hands it to the next tenant's work.
    act_for(&mut connection, TENANT).await;
    sqlx::query("COMMIT")
        .execute(&mut connection)
        .await
        .unwrap();
    for table in TABLES {
        let all = count(&mut connection, format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(all, 0, "{table}: after a tenant's transaction ended");
    }
}

/// Rows a statement touched outside any transaction.
async fn outcome_outside(connection: &mut PgConnection, sql: String) -> u64 {
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(connection)
        .await
        .unwrap()
        .rows_affected()
}

#[tokio::test]
async fn the_system_scope_reads_every_tenant_and_writes_rows_for_none() {
    let (database, _store) = two_tenants().await;
    let mut connection = PgConnection::connect(database.system_url()).await.unwrap();
    act_for(&mut connection, "*").await;

    for table in TABLES {
        let all = count(&mut connection, format!("SELECT count(*) FROM {table}")).await;
        assert!(all >= 2, "{table}: both tenants' rows are visible");
    }
    let insert = "INSERT INTO inbox VALUES ('*', 'c', 'system', NULL, 'buffered', 0)";
    assert_eq!(
        outcome(&mut connection, insert.to_owned()).await,
        Err("42501".to_owned()),
        "the system's role inserts no row"
    );
    let theirs = format!("INSERT INTO inbox VALUES ('{TENANT}', 'c', 'x', NULL, 'buffered', 0)");
    assert_eq!(
        outcome(&mut connection, theirs).await,
        Err("42501".to_owned()),
        "no tenant's row is written in the system scope"
    );
}

/// The backstop of decision 0040: whoever holds the serving role's credentials can declare `'*'`
/// in a raw query, and then reads, updates and deletes nothing of anybody's.
#[tokio::test]
async fn the_serving_role_cannot_act_for_the_system() {
    let (database, _store) = two_tenants().await;
    let before = census(&database).await;
    let mut connection = PgConnection::connect(database.serving_url()).await.unwrap();
    act_for(&mut connection, "*").await;

    for table in TABLES {
        let all = count(&mut connection, format!("SELECT count(*) FROM {table}")).await;
        assert_eq!(all, 0, "{table}: read");
        let update = format!("UPDATE {table} SET tenant = tenant");
        assert_eq!(
            outcome(&mut connection, update).await,
            Ok(0),
            "{table}: update"
        );
        let delete = format!("DELETE FROM {table}");
        assert_eq!(
            outcome(&mut connection, delete).await,
            Ok(0),
            "{table}: delete"
        );
    }
    let leases = count(&mut connection, "SELECT count(*) FROM leases".to_owned()).await;
    assert_eq!(leases, 0, "leases: read");
    let take = "INSERT INTO leases (role, holder, expires_at, epoch) VALUES ('timers', 'x', 0, 1)";
    assert_eq!(
        outcome(&mut connection, take.to_owned()).await,
        Err("42501".to_owned()),
        "leases: taken"
    );
    sqlx::query("COMMIT")
        .execute(&mut connection)
        .await
        .unwrap();
    assert_eq!(census(&database).await, before, "nothing changed");
}

#[tokio::test]
async fn tenant_names_are_literals_whatever_they_contain() {
    let database = TestDatabase::create().await;
    let store = replica(&database).await;
    let odd = [
        r"o'brien",
        r"back\slash",
        r"\'; SELECT set_config('sutra.tenant', '*', true); --",
    ];
    for (n, tenant) in odd.iter().enumerate() {
        started(&store, tenant, &format!("i-{n}")).await;
    }

    for (n, tenant) in odd.iter().enumerate() {
        let listed = store
            .instance_summaries(tenant, &sutra_store::InstanceFilter::default(), false)
            .await
            .unwrap();
        let ids: Vec<_> = listed.iter().map(|r| r.id.clone()).collect();
        assert_eq!(
            ids,
            [format!("i-{n}")],
            "{tenant} sees its own instance only"
        );
    }
    let mut admin = PgConnection::connect(database.admin_url()).await.unwrap();
    let stored: Vec<String> = sqlx::query_scalar("SELECT tenant FROM instances ORDER BY id")
        .fetch_all(&mut admin)
        .await
        .unwrap();
    assert_eq!(stored, odd, "stored exactly as named");
}

/// A message's look-up is one simple-protocol message whose channel, id and key travel as
/// literals (decision 0073): it reads its own tenant's inbox and waits only, and whatever the
/// message holds is text — no statement of its own, no other tenant's rows, nothing changed.
#[tokio::test]
async fn a_look_up_reads_its_tenants_rows_only_whatever_its_message_holds() {
    let (database, store) = two_tenants().await;
    let before = census(&database).await;

    let own = store
        .look_up(TENANT, REPLIES, "unseen", Some("i-acme"))
        .await
        .unwrap();
    assert_eq!(
        own.wait.map(|wait| wait.instance).as_deref(),
        Some("i-acme")
    );
    let buffered = store
        .look_up(TENANT, REPLIES, "early-i-acme", Some("i-acme"))
        .await
        .unwrap();
    assert!(
        buffered.answer.is_some() && buffered.wait.is_none(),
        "a message with an inbox row is answered, not relayed: {buffered:?}"
    );
    let theirs = store
        .look_up(TENANT, REPLIES, "early-i-globex", Some("i-globex"))
        .await
        .unwrap();
    assert_eq!(
        theirs,
        Lookup::default(),
        "another tenant's rows are not seen"
    );
    let odd = [
        r"x'; SET LOCAL sutra.tenant = '*'; SELECT '",
        r"\'; DELETE FROM waits; --",
        "o'brien\\",
    ];
    for text in odd {
        let found = store.look_up(TENANT, text, text, Some(text)).await.unwrap();
        assert_eq!(found, Lookup::default(), "{text} is a literal");
    }
    assert_eq!(census(&database).await, before, "nothing changed");
}
