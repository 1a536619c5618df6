//! What leases and deployment convergence rest on in PostgreSQL itself: the lease table belongs
//! to the system scope alone, and a deploy on one replica is announced to the others at its
//! commit.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use sutra_store::prelude::*;
use sutra_testkit::postgres::TestDatabase;

use crate::common::{HOUR, TENANT, replica};

/// Far above the milliseconds a notice takes on a local cluster.
const PATIENCE: Duration = Duration::from_secs(20);

/// Runs `sql` in a transaction that declared `scope`; its count, or the SQLSTATE it was refused
/// with.
async fn as_scope(database: &TestDatabase, scope: &str, sql: &str) -> Result<i64, String> {
    let mut connection = PgConnection::connect(database.url()).await.unwrap();
    let mut tx = connection.begin().await.unwrap();
    sqlx::query("SELECT set_config('sutra.tenant', $1, true)")
        .bind(scope)
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_owned()))
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            e.as_database_error()
                .and_then(|e| e.code())
                .map_or_else(|| e.to_string(), |code| code.into_owned())
        })
}

#[tokio::test]
async fn leases_belong_to_the_system_scope_alone() {
    let database = TestDatabase::create().await;
    let store = replica(&database).await;
    store
        .acquire_lease("timers", "replica-a", HOUR)
        .await
        .unwrap()
        .expect("a free lease is granted");
    let count = "SELECT count(*) FROM leases";
    let take = "WITH taken AS (UPDATE leases SET holder = 'intruder' RETURNING 1)
                SELECT count(*) FROM taken";
    let forge = "WITH forged AS (
                     INSERT INTO leases (role, holder, expires_at, epoch)
                     VALUES ('history-purger', 'intruder', 0, 1) RETURNING 1)
                 SELECT count(*) FROM forged";

    assert_eq!(as_scope(&database, TENANT, count).await, Ok(0), "unseen");
    assert_eq!(as_scope(&database, TENANT, take).await, Ok(0), "untouched");
    assert_eq!(
        as_scope(&database, TENANT, forge).await,
        Err("42501".to_owned()),
        "a tenant cannot take a role"
    );
    assert_eq!(as_scope(&database, "*", count).await, Ok(1));
    let leases = store.leases().await.unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].holder, "replica-a");
}

#[tokio::test]
async fn a_deploy_is_announced_to_every_other_replica_at_its_commit() {
    let database = TestDatabase::create().await;
    let deploying = replica(&database).await;
    let listening = std::sync::Arc::new(replica(&database).await);
    listening
        .deployment_notice()
        .await
        .expect("the first wait returns once listening");
    let next = tokio::spawn({
        let listening = std::sync::Arc::clone(&listening);
        async move { listening.deployment_notice().await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!next.is_finished(), "no deploy, no notice");

    deploying
        .deploy(TENANT, "payments", "name: payments")
        .await
        .unwrap();

    tokio::time::timeout(PATIENCE, next)
        .await
        .expect("the notice arrives")
        .unwrap()
        .unwrap();
    assert_eq!(
        listening.deployment_revision().await.unwrap(),
        1,
        "what was announced is visible"
    );
}
