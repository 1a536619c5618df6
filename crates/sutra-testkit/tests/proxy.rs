//! The proxy the chaos tests put between replicas and PostgreSQL does what its faults say, on a
//! real database connection: it forwards, holds traffic back by a delay, swallows it during a
//! partition and lets it through when healed, and cuts connections.

use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::proxy::Proxy;

async fn one(connection: &mut PgConnection) -> sqlx::Result<i32> {
    sqlx::query_scalar("SELECT 1").fetch_one(connection).await
}

#[tokio::test]
async fn the_proxy_delays_partitions_and_cuts_a_database_connection() {
    let database = TestDatabase::create().await;
    let (proxy, url) = Proxy::in_front_of(database.url());
    let mut connection = PgConnection::connect(&url).await.unwrap();
    assert_eq!(one(&mut connection).await.unwrap(), 1, "forwarded");

    let delay = Duration::from_millis(200);
    proxy.delay(delay);
    let asked = Instant::now();
    one(&mut connection).await.unwrap();
    assert!(asked.elapsed() >= delay, "held back by the delay");

    proxy.partition();
    let query = tokio::spawn(async move {
        let answer = one(&mut connection).await;
        (connection, answer)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!query.is_finished(), "nothing passes a partition");
    proxy.heal();
    let (mut connection, answer) = query.await.unwrap();
    assert_eq!(answer.unwrap(), 1, "what waited passes once healed");

    proxy.cut();
    assert!(
        one(&mut connection).await.is_err(),
        "a cut connection fails"
    );
    let mut again = PgConnection::connect(&url).await.unwrap();
    assert_eq!(one(&mut again).await.unwrap(), 1, "new connections pass");
}
