//! A tenant's live instances, bounded (issue 48, `sutra.tenants.max-live-instances`), through
//! the HTTP API of a real `sutra serve`: a start past the quota is refused with
//! `429 SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED` (retryable) and starts nothing, and is taken again
//! once an instance has ended and been counted; a step calling past it fails its instance with
//! the code, on SQLite and PostgreSQL.

mod common;

use common::composition;
use serde_json::json;
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve, until_ok};

const PARKED: &str = r#"
name: quota
channels:
  orders: { transport: http, correlate: data.id }
  paid: { transport: http, correlate: data.id }
  fans: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: wait
        receive: { channel: paid, key: "vars.input.id" }
  fan:
    start: { channel: fans }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          call: { flow: child, input: "= item" }
  child:
    nodes:
      - id: wait
        receive: { channel: paid, key: "'child-' + string(vars.input)" }
"#;

async fn quota_of_two_holds(server: &Server) {
    for id in ["o1", "o2"] {
        composition::start(server, "orders", id, json!({"id": id})).await;
    }
    let (status, body) = server.send("orders", "start-o3", json!({"id": "o3"})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(
        body["code"], "SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED",
        "{body}"
    );
    assert_eq!(body["retryable"], true, "{body}");
    let (_, listed) = server.get("/v1/instances?limit=10").await;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(2),
        "none started"
    );

    // One ends; once the sampler has counted it (every 10 s), a start is taken again.
    let (status, body) = server.send("paid", "pay-o1", json!({"id": "o1"})).await;
    assert!(status < 300, "{status} {body}");
    until_ok(async || {
        let (status, body) = server.send("orders", "start-o3", json!({"id": "o3"})).await;
        match status {
            202 => Ok(()),
            429 => Err(format!("still refused: {body}")),
            _ => panic!("{status} {body}"),
        }
    })
    .await;
}

#[tokio::test]
async fn a_start_past_the_tenants_live_instances_is_refused_on_sqlite() {
    let scratch = Scratch::new("tenant-quota");
    let server = serve!(scratch.database())
        .env("SUTRA_TENANTS_MAX_LIVE_INSTANCES", "2")
        .deployed(PARKED)
        .await;
    quota_of_two_holds(&server).await;
}

#[tokio::test]
async fn a_start_past_the_tenants_live_instances_is_refused_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url())
        .env("SUTRA_TENANTS_MAX_LIVE_INSTANCES", "2")
        .deployed(PARKED)
        .await;
    quota_of_two_holds(&server).await;
}

/// The fan itself is one live instance of three: its third call would be the fourth.
#[tokio::test]
async fn a_step_calling_past_the_tenants_live_instances_fails_its_instance() {
    let scratch = Scratch::new("tenant-quota-calls");
    let server = serve!(scratch.database())
        .env("SUTRA_TENANTS_MAX_LIVE_INSTANCES", "3")
        .deployed(PARKED)
        .await;
    let fan =
        composition::start(&server, "fans", "f", json!({"id": "f", "items": [1, 2, 3]})).await;
    let failed = server.wait_for_status(&fan, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED",
        "{failed}"
    );
    assert_eq!(failed["failure"]["node"], "each", "{failed}");
}
