//! A step's statements are bounded by the claim timeout (decision 0048): a lane's claim is its
//! group transaction's row lock, so a statement that hangs would hold the instance for as long as
//! it hangs.

use std::time::Duration;

use jiff::SignedDuration;
use sqlx::{Connection, PgConnection};
use sutra_store::Error;
use sutra_store::prelude::*;
use sutra_store_postgres::PostgresOptions;
use sutra_testkit::postgres::TestDatabase;

use crate::common::{TENANT, arming, owner, started};

/// Far below `lock_timeout` (5 s), so that the statement timeout is what cancels the wait.
const CLAIM_TIMEOUT: Duration = Duration::from_millis(500);
const INSTANCE: &str = "0190c0de-0000-7000-8000-000000000001";

/// Another session holds `instances` in `SHARE` mode for as long as the test likes: a claim
/// (`FOR NO KEY UPDATE`, a row-share lock) still takes the row, but the step's commit, an
/// `UPDATE`, queues behind that session — well past the claim timeout. The statement is
/// cancelled at the bound, the step fails retry-safe instead of hanging, and its transaction's
/// row lock goes with it: while the other session still holds the table, the next claim of the
/// instance is not refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_statement_past_the_claim_timeout_is_cancelled_and_releases_the_claim() {
    let database = TestDatabase::create().await;
    let options = PostgresOptions {
        system_url: Some(database.system_url().to_owned()),
        step_statement_timeout: Some(CLAIM_TIMEOUT),
        ..PostgresOptions::default()
    };
    let store = sutra_store_postgres::open(database.serving_url(), &options)
        .await
        .expect("the test database opens");
    started(&store, TENANT, INSTANCE).await;

    let mut holder = PgConnection::connect(database.url()).await.unwrap();
    let mut holding = holder.begin().await.unwrap();
    sqlx::query("LOCK TABLE instances IN SHARE MODE")
        .execute(&mut *holding)
        .await
        .unwrap();

    let claim_timeout = SignedDuration::try_from(CLAIM_TIMEOUT).unwrap();
    let lane = owner("replica-a/lane-0");
    let mut group = store.group(TENANT).await.unwrap();
    let claimed = (group.claim(TENANT, INSTANCE, &lane, claim_timeout))
        .await
        .expect("a share lock on the table leaves the row to claim");
    let written = group.commit_step(&arming(&claimed, Vec::new())).await;
    match written {
        Err(Error::Unavailable(reason)) => assert!(
            reason.contains("statement timeout"),
            "cancelled by the statement timeout, not another: {reason}"
        ),
        other => panic!("the step's write was not cancelled: {other:?}"),
    }
    group.rollback().await.unwrap();

    let mut next = store.group(TENANT).await.unwrap();
    let again = next.claim(TENANT, INSTANCE, &lane, claim_timeout).await;
    assert!(
        again.is_ok(),
        "the cancelled step's transaction ended, and its row lock with it: {again:?}"
    );
    holding.rollback().await.unwrap();
}
