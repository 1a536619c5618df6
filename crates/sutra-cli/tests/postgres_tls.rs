//! TLS between Sutra and PostgreSQL (decision 0034), against a PostgreSQL this test starts itself
//! that accepts TLS alone: its certificate signed by a CA made for the test, `hostssl` lines
//! only in its `pg_hba.conf`. `sutra db migrate` and `sutra serve` connect as libpq's users
//! would, with `sslmode=verify-full&sslrootcert=CA`, and run an instance; the wrong CA, and no
//! TLS at all, are refused at the start with a message saying why, the password never shown.
//!
//! Run: `SUTRA_TEST_DATABASE_URL` is not needed (the cluster is the test's own), PostgreSQL's
//! server binaries are; without them the test fails saying what to install, never skips.

use std::process::{Command, Output};

use serde_json::json;
use sutra_testkit::postgres::{self, DedicatedCluster};
use sutra_testkit::{Authority, Scratch, Server, serve};

const FLOW: &str = r#"
name: greet
channels:
  hellos: { transport: http, correlate: data.id }
flows:
  greet:
    start: { channel: hellos }
    nodes:
      - id: done
        end: {}
"#;

/// `url` with a query of TLS settings.
fn with(url: &str, query: &str) -> String {
    format!("{url}?{query}")
}

fn db_migrate(url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["db", "migrate", "--db", url])
        .output()
        .expect("run sutra db migrate")
}

/// Starts `sutra serve` on `url`, expecting it to refuse: returns what it said before exiting.
fn refused_start(url: &str) -> String {
    match Server::try_start(&serve!(url)) {
        Ok(_) => panic!("sutra serve started on {url}"),
        Err(said) => said,
    }
}

#[tokio::test]
async fn serve_and_migrate_reach_postgresql_over_verified_tls_and_nothing_else() {
    let authority = Authority::new("sutra test PostgreSQL CA");
    let cluster = DedicatedCluster::start_over_tls(&authority).await;
    let files = Scratch::new("postgres-tls");
    let ca = files.path().join("ca.pem");
    std::fs::write(&ca, authority.pem()).unwrap();
    let stranger = files.path().join("stranger.pem");
    std::fs::write(&stranger, Authority::new("another CA").pem()).unwrap();
    let verified =
        |ca: &std::path::Path| format!("sslmode=verify-full&sslrootcert={}", ca.display());

    // The schema's owner migrates over TLS, and the engine's role serves over it.
    let migrated = db_migrate(&with(cluster.owner_url(), &verified(&ca)));
    assert!(
        migrated.status.success(),
        "sutra db migrate over TLS failed: {}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    let server = serve!(with(cluster.url(), &verified(&ca)))
        .deployed(FLOW)
        .await;
    let (status, body) = server.send("hellos", "h-1", json!({"id": "tls"})).await;
    assert_eq!(status, 202, "{body}");
    let id = body["instance"].as_str().expect("an instance").to_owned();
    server.wait_for_status(&id, "completed").await;
    let encrypted: i64 = postgres::scalar(
        cluster.admin_url(),
        "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
         WHERE ssl AND usename = 'sutra_engine'",
    )
    .await
    .unwrap();
    assert!(encrypted > 0, "the engine's connections are not over TLS");

    // A CA that did not sign the server's certificate: refused, saying so, password hidden.
    let said = refused_start(&with(cluster.url(), &verified(&stranger)));
    assert!(said.contains("exit status: 1"), "{said}");
    assert!(
        said.contains("cannot open the store at postgres://sutra_engine:***@127.0.0.1:"),
        "{said}"
    );
    assert!(
        said.contains("TLS certificate was refused (UnknownIssuer)"),
        "{said}"
    );
    let migrate_refused = db_migrate(&with(cluster.owner_url(), &verified(&stranger)));
    let migrate_said = String::from_utf8_lossy(&migrate_refused.stderr);
    assert!(!migrate_refused.status.success());
    assert!(migrate_said.contains("UnknownIssuer"), "{migrate_said}");

    // No TLS: the server accepts TCP connections with TLS alone.
    let said = refused_start(&with(cluster.url(), "sslmode=disable"));
    assert!(
        said.contains("PostgreSQL refused the login: no pg_hba.conf entry"),
        "{said}"
    );
    assert!(said.contains("no encryption"), "{said}");
}

#[test]
fn a_bad_sslmode_or_an_unreadable_root_certificate_refuses_the_start_before_connecting() {
    // Nothing listens there: the settings are refused before any connection is tried.
    let nowhere = "postgres://sutra:secret@127.0.0.1:1/sutra";
    let bad_mode = db_migrate(&with(nowhere, "sslmode=verify_full"));
    let said = String::from_utf8_lossy(&bad_mode.stderr);
    assert_eq!(bad_mode.status.code(), Some(1), "{said}");
    assert!(
        said.contains("sslmode `verify_full` is not one of disable, allow, prefer"),
        "{said}"
    );
    assert!(!said.contains("secret"), "{said}");

    let missing = db_migrate(&with(
        nowhere,
        "sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
    ));
    let said = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "{said}");
    assert!(
        said.contains("cannot read sslrootcert /nonexistent/ca.pem"),
        "{said}"
    );
}
