//! An instance whose stored snapshot cannot be decoded is failed in its row (issue 48, finding 8;
//! docs/decisions/0082), through the HTTP API of a real `sutra serve` on SQLite and PostgreSQL:
//! the message that meets it is refused, the instance is listed as failed with
//! `SUTRA.STORE.CORRUPT` while the rest of the page lists as before, a restore is refused until
//! its row is repaired, and once repaired and restored it runs to its end.

use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, Connection, PgConnection, SqliteConnection};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve};

const CORRUPT: &str = "SUTRA.STORE.CORRUPT";

const PARKED: &str = r#"
name: unreadable
channels:
  orders: { transport: http, correlate: data.id }
  paid: { transport: http, correlate: data.order }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: wait
        receive: { channel: paid, key: "vars.input.id" }
        output: payment
      - id: done
        end: {}
"#;

/// The database behind the server, reached directly as an operator repairing a row would.
enum Database {
    Sqlite(SqliteConnection),
    Postgres(PgConnection),
}

impl Database {
    /// The instance's snapshot, as the text its row holds.
    async fn snapshot(&mut self, instance: &str) -> String {
        let read = match self {
            Database::Sqlite(connection) => {
                sqlx::query_scalar("SELECT snapshot FROM instances WHERE id = ?1")
                    .bind(instance)
                    .fetch_one(connection)
                    .await
            }
            Database::Postgres(connection) => {
                sqlx::query_scalar("SELECT snapshot::text FROM instances WHERE id = $1")
                    .bind(instance)
                    .fetch_one(connection)
                    .await
            }
        };
        read.expect("the instance's row")
    }

    /// Writes `snapshot` over the instance's: JSON text on PostgreSQL, any text on SQLite.
    async fn overwrite(&mut self, instance: &str, snapshot: &str) {
        let sql = |placeholders: [&str; 2]| {
            let [id, text] = placeholders;
            AssertSqlSafe(format!(
                "UPDATE instances SET snapshot = {text} WHERE id = {id}"
            ))
        };
        let written = match self {
            Database::Sqlite(connection) => sqlx::query(sql(["?1", "?2"]))
                .bind(instance)
                .bind(snapshot)
                .execute(connection)
                .await
                .map(|done| done.rows_affected()),
            Database::Postgres(connection) => sqlx::query(sql(["$1", "$2::jsonb"]))
                .bind(instance)
                .bind(snapshot)
                .execute(connection)
                .await
                .map(|done| done.rows_affected()),
        };
        assert_eq!(written.expect("the row is written"), 1);
    }
}

async fn started(server: &Server, id: &str) -> String {
    let (status, body) = server.send("orders", id, json!({"id": id})).await;
    assert_eq!(status, 202, "{body}");
    let instance = body["instance"].as_str().unwrap().to_owned();
    server.wait_for_node(&instance, "wait").await;
    instance
}

/// Pays `order`; the answer.
async fn paid(server: &Server, order: &str, attempt: u32) -> (u16, Value) {
    let event = format!("pay-{order}-{attempt}");
    server.send("paid", &event, json!({"order": order})).await
}

fn refused_as_corrupt((status, body): &(u16, Value), saying: &str) {
    assert_eq!(
        (*status, body["code"].as_str()),
        (500, Some(CORRUPT)),
        "{body}"
    );
    let detail = body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains(saying),
        "the detail says {saying:?}: {body}"
    );
}

/// The page's items, as (id, status, failure code).
fn listed(page: &Value) -> Vec<(&str, &str, Option<&str>)> {
    let items = page["items"].as_array().expect("items");
    items.iter().map(item).collect()
}

fn item(listed: &Value) -> (&str, &str, Option<&str>) {
    (
        listed["id"].as_str().unwrap(),
        listed["status"].as_str().unwrap(),
        listed["failure"]["code"].as_str(),
    )
}

async fn an_unreadable_instance_is_listed_as_failed_and_restored_once_repaired(
    server: &Server,
    mut database: Database,
    unreadable: &str,
) {
    let [first, bad, last] = [
        started(server, "o1").await,
        started(server, "o2").await,
        started(server, "o3").await,
    ];
    let snapshot = database.snapshot(&bad).await;
    database.overwrite(&bad, unreadable).await;

    // The message that meets it is refused, and the instance is failed in its row by then.
    refused_as_corrupt(&paid(server, "o2", 1).await, "cannot be read");
    let (status, failed) = server.get("/v1/instances?status=failed").await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(listed(&failed), [(bad.as_str(), "failed", Some(CORRUPT))]);
    let detail = failed["items"][0]["failure"]["detail"].as_str().unwrap();
    assert!(detail.contains("/restore"), "it says what to do: {detail}");
    let (status, all) = server.get("/v1/instances").await;
    assert_eq!(status, 200, "{all}");
    assert_eq!(
        listed(&all),
        [
            (first.as_str(), "suspended", None),
            (bad.as_str(), "failed", Some(CORRUPT)),
            (last.as_str(), "suspended", None),
        ],
        "one bad row leaves the page whole"
    );
    let (status, keyed) = server.get("/v1/instances?correlation_key=o3").await;
    assert_eq!((status, listed(&keyed).len()), (200, 1), "{keyed}");
    let read = server.get(&format!("/v1/instances/{bad}")).await;
    refused_as_corrupt(&read, "restore");

    // Selected by its failure code; restored neither alone nor in bulk while it cannot be read.
    let bulk = json!({
        "filter": {"status": "failed", "failure_code": CORRUPT},
        "action": "restore",
    });
    let (status, page) = server.post_json("/v1/instances/bulk", &bulk).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(
        (&page["results"][0]["instance"], &page["results"][0]["code"]),
        (&json!(bad), &json!(CORRUPT)),
        "{page}"
    );
    let restore = format!("/v1/instances/{bad}/restore");
    refused_as_corrupt(&server.post(&restore).await, "is repaired");

    // Repaired, it still waits for the restore: nothing runs an instance listed as failed.
    database.overwrite(&bad, &snapshot).await;
    refused_as_corrupt(&paid(server, "o2", 2).await, "marked failed");
    let repaired = server.instance(&bad).await;
    assert_eq!(
        (&repaired["status"], &repaired["failure"]["code"]),
        (&json!("failed"), &json!(CORRUPT)),
        "{repaired}"
    );

    let (status, restored) = server.post(&restore).await;
    assert_eq!(
        (status, &restored["status"]),
        (200, &json!("suspended")),
        "{restored}"
    );
    let (status, body) = paid(server, "o2", 3).await;
    assert_eq!(status, 202, "{body}");
    server.wait_for_status(&bad, "completed").await;
    let (_, failed) = server.get("/v1/instances?status=failed").await;
    assert_eq!(listed(&failed), []);
}

#[tokio::test]
async fn an_unreadable_instance_is_failed_in_its_row_on_sqlite() {
    let scratch = Scratch::new("unreadable-instances");
    let server = serve!(scratch.database()).deployed(PARKED).await;
    let database = SqliteConnection::connect(&scratch.database())
        .await
        .unwrap();
    // Not even JSON: a row cut short.
    an_unreadable_instance_is_listed_as_failed_and_restored_once_repaired(
        &server,
        Database::Sqlite(database),
        r#"{"truncated"#,
    )
    .await;
}

#[tokio::test]
async fn an_unreadable_instance_is_failed_in_its_row_on_postgres() {
    let test = TestDatabase::create().await;
    let server = serve!(test.url()).deployed(PARKED).await;
    let database = PgConnection::connect(test.admin_url()).await.unwrap();
    // A JSONB column holds JSON, but not necessarily a snapshot.
    an_unreadable_instance_is_listed_as_failed_and_restored_once_repaired(
        &server,
        Database::Postgres(database),
        r#"{"corrupt": true}"#,
    )
    .await;
}
