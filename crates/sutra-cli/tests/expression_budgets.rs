//! The probes of issue 48's findings 1 and 2, through the HTTP API of a real `sutra serve`, on
//! SQLite and PostgreSQL (decision 0074): an 18 KB message against `l.map(a, l)` (it ended the
//! process in an allocation failure) and a two-level comprehension over a 16 KB list (it held a
//! lane for 32 s, then answered a retryable 503) each fail their instance in place with
//! `SUTRA.RUNTIME.EXPRESSION.BUDGET`; variables grown past their bound fail the node growing
//! them with `SUTRA.RUNTIME.VARS.TOO_LARGE`; and the server goes on answering everyone else.

mod common;

use common::composition;
use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve};

const PROBES: &str = r#"
name: probes
channels:
  squares: { transport: http, correlate: data.id }
  pairs: { transport: http, correlate: data.id }
  growths: { transport: http, correlate: data.id }
  pings: { transport: http, correlate: data.id }
flows:
  square:
    start: { channel: squares }
    nodes:
      - id: blow
        set: { x: "= vars.input.l.map(a, vars.input.l)" }
  pair:
    start: { channel: pairs }
    nodes:
      - id: spin
        set: { x: "= vars.input.l.exists(a, vars.input.l.exists(b, a == b + 1000000))" }
  growth:
    start: { channel: growths }
    nodes:
      - id: double
        set: { a: "= vars.input.s + vars.input.s" }
      - id: again
        set: { b: "= vars.a + vars.a" }
  ping:
    start: { channel: pings }
    nodes:
      - id: back
        end: { reply: "= vars.input.id" }
"#;

/// The instance `channel`'s message started, once it has failed: its failure's code and node.
async fn failed(server: &Server, channel: &str, id: &str, data: Value) -> (String, String) {
    let instance = composition::start(server, channel, id, data).await;
    let failed = server.wait_for_status(&instance, "failed").await;
    let text = |field: &str| failed["failure"][field].as_str().unwrap_or("").to_owned();
    (text("code"), text("node"))
}

async fn probes_fail_in_place(server: &Server) {
    let eighteen_kb = json!({"id": "square", "l": vec![1; 9_000]});
    assert_eq!(
        failed(server, "squares", "square", eighteen_kb).await,
        ("SUTRA.RUNTIME.EXPRESSION.BUDGET".into(), "blow".into())
    );
    let sixteen_kb = json!({"id": "pair", "l": (1_000..4_200).collect::<Vec<_>>()});
    assert_eq!(
        failed(server, "pairs", "pair", sixteen_kb).await,
        ("SUTRA.RUNTIME.EXPRESSION.BUDGET".into(), "spin".into())
    );
    let grows = json!({"id": "growth", "s": "x".repeat(30_000)});
    assert_eq!(
        failed(server, "growths", "growth", grows).await,
        ("SUTRA.RUNTIME.VARS.TOO_LARGE".into(), "again".into())
    );
    // Everyone else is still answered, by the same process.
    let ping = composition::start(server, "pings", "ping", json!({"id": "ping"})).await;
    server.wait_for_status(&ping, "completed").await;
}

#[tokio::test]
async fn hostile_expressions_fail_their_instance_in_place_on_sqlite() {
    let scratch = Scratch::new("expression-budgets");
    let server = serve!(scratch.database())
        .env("SUTRA_INSTANCE_MAX_VARS_BYTES", "100000")
        .deployed(PROBES)
        .await;
    probes_fail_in_place(&server).await;
}

#[tokio::test]
async fn hostile_expressions_fail_their_instance_in_place_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url())
        .env("SUTRA_INSTANCE_MAX_VARS_BYTES", "100000")
        .deployed(PROBES)
        .await;
    probes_fail_in_place(&server).await;
}
