//! `sutra bench` at more clients than PostgreSQL takes connections (issue 36): the engine's side
//! needs no connection per client, and the pgbench reference is capped at what the server can
//! spare, which the report says. Speed is not asserted: this machine's load is not the test's to
//! judge.

use std::process::{Command, Stdio};

use serde_json::Value;
use sutra_testkit::postgres::{TestDatabase, scalar};

const CLIENTS: u64 = 128;

#[tokio::test]
async fn two_tasks_at_128_clients_completes_and_reports_its_references_connections() {
    let database = TestDatabase::empty().await;
    let limit: String = scalar(database.admin_url(), "SHOW max_connections")
        .await
        .expect("the admin connection answers");
    let limit: u64 = limit.parse().expect("max_connections is a number");

    let report = bench(&database);
    assert_eq!(report["clients"], CLIENTS, "{report}");
    assert_eq!(report["instances_completed"], 40, "{report}");
    assert_eq!(report["stopped_early"], false, "{report}");
    let reference = &report["reference"];
    let used = reference["clients"]
        .as_u64()
        .expect("the reference's clients");
    assert!(used >= 1 && used < limit, "{report}");
    match &reference["capped"] {
        Value::Null => assert_eq!(used, CLIENTS, "uncapped means every client: {report}"),
        cap => {
            assert!(used < CLIENTS, "{report}");
            assert_eq!(cap["requested"], CLIENTS, "{report}");
            assert_eq!(cap["max_connections"], limit, "{report}");
            for field in ["reserved", "in_use", "kept_for_engine"] {
                assert!(cap[field].is_u64(), "{field}: {report}");
            }
        }
    }
    if limit <= CLIENTS {
        assert!(reference["capped"].is_object(), "{report}");
    }
}

/// Runs `sutra bench two-tasks` at [`CLIENTS`] clients through `database`'s admin URL, to its
/// end; its JSON report.
fn bench(database: &TestDatabase) -> Value {
    let clients = CLIENTS.to_string();
    let output = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["bench", "two-tasks", "--db", database.admin_url()])
        .args(["--instances", "40", "--clients", &clients])
        .args(["--max-seconds", "60", "--reference-seconds", "1", "--json"])
        .env_remove("SUTRA_SERVER")
        .stdin(Stdio::null())
        .output()
        .expect("sutra runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("a JSON report")
}
