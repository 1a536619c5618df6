//! `GET /v1/instances` lists summaries, not variables (issue 48, finding 7; decision 0081),
//! through the HTTP API of a real `sutra serve` on SQLite and PostgreSQL: instances holding
//! 900 KB of variables each list in a page of a few kilobytes, a correlation key still matches
//! what their tokens are parked on, and `vars=true` answers them whole, a page ending with a
//! `next` once its variables reach 4 MiB.

mod common;

use common::composition;
use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve};

const PARKED: &str = r#"
name: lists
channels:
  orders: { transport: http, correlate: data.id }
  paid: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: wait
        receive: { channel: paid, key: "vars.input.id" }
"#;

/// Each instance's variables: under the intake's 1 MiB, and five of them past a whole page's
/// 4 MiB.
const BLOB_BYTES: usize = 900_000;

fn ids(page: &Value) -> Vec<&str> {
    let items = page["items"].as_array().expect("items");
    items.iter().map(|i| i["id"].as_str().unwrap()).collect()
}

async fn listed(server: &Server, query: &str) -> Value {
    let (status, page) = server.get(&format!("/v1/instances?{query}")).await;
    assert_eq!(status, 200, "{query}: {page}");
    page
}

async fn lists_summaries_and_whole_instances_only_when_asked(server: &Server) {
    let blob = "x".repeat(BLOB_BYTES);
    let mut started = Vec::new();
    for n in 0..6 {
        let id = format!("o{n}");
        let data = json!({"id": id, "blob": blob});
        let instance = composition::start(server, "orders", &id, data).await;
        server.wait_for_status(&instance, "suspended").await;
        started.push(instance);
    }

    let page = listed(server, "limit=500").await;
    assert_eq!(ids(&page), started, "{page}");
    assert!(
        page.to_string().len() < 8_000,
        "a page of summaries: {page}"
    );
    let first = &page["items"][0];
    assert_eq!(
        (&first["flow"], &first["version"], &first["status"]),
        (&json!("order"), &json!(1), &json!("suspended"))
    );
    assert!(first.get("vars").is_none() && first.get("tokens").is_none());
    assert_eq!(page["next"], Value::Null);

    let keyed = listed(server, "correlation_key=o3").await;
    assert_eq!(ids(&keyed), [started[3].as_str()], "{keyed}");
    assert!(keyed["items"][0].get("vars").is_none());

    let whole = listed(server, "vars=true&limit=500").await;
    assert_eq!(ids(&whole), started[..5], "the fifth reaches 4 MiB");
    assert_eq!(whole["items"][4]["vars"]["input"]["blob"], json!(blob));
    assert_eq!(whole["items"][4]["tokens"][0]["park"]["kind"], "receive");
    assert_eq!(whole["next"], json!(started[4]));
    let rest = listed(server, &format!("vars=true&limit=500&after={}", started[4])).await;
    assert_eq!(ids(&rest), [started[5].as_str()]);
    assert_eq!(rest["next"], Value::Null);
}

#[tokio::test]
async fn instances_list_without_their_variables_unless_asked_on_sqlite() {
    let scratch = Scratch::new("instance-lists");
    let server = serve!(scratch.database()).deployed(PARKED).await;
    lists_summaries_and_whole_instances_only_when_asked(&server).await;
}

#[tokio::test]
async fn instances_list_without_their_variables_unless_asked_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url()).deployed(PARKED).await;
    lists_summaries_and_whole_instances_only_when_asked(&server).await;
}
