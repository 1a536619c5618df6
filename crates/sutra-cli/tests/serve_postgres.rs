//! End-to-end on PostgreSQL: a real `sutra serve --db postgres://…` on a fresh database of its
//! own, connected as an ordinary role that may act for tenants only (row-level security in
//! force) and doing its cross-tenant work as another (decision 0040), driven only over HTTP; and
//! `sutra db migrate`, the schema step a fleet runs before replicas that do not migrate.

use std::process::Command;

use serde_json::{Value, json};
use sutra_testkit::postgres::{TestDatabase, scalar};
use sutra_testkit::{Server, ServerOptions, assert_audit_sequence_is_whole, serve, stdout_of};

const FLOWS: &str = r#"
name: shop
channels:
  orders:
    transport: http
    correlate: data.id
  payments:
    transport: http
    correlate: data.order
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: cool
        wait: { duration: PT0.2S }
      - id: pay
        receive: { channel: payments, key: vars.input.id, timeout: PT1H, on-timeout: expired }
        output: payment
      - id: done
        end: { reply: { order: "= vars.input.id", paid: "= vars.payment.amount" } }
      - id: expired
        fail: { code: ORDER.EXPIRED, detail: "= 'no payment for ' + vars.input.id" }
"#;

/// Serving as a role of `sutra_app` alone, with the system's work as a role of `sutra_system`
/// alone: the timer below fires only if due deliveries and the `timers` lease are read and taken
/// as the system's role.
fn serving(database: &TestDatabase) -> ServerOptions {
    serve!(database.serving_url()).env("SUTRA_STORE_SYSTEM_URL", database.system_url())
}

fn instance_id(body: &Value) -> String {
    body["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("no instance in {body}"))
        .to_owned()
}

/// Runs `sutra db migrate` on the database as the schema's owner; returns its stdout.
fn db_migrate(database: &TestDatabase) -> String {
    stdout_of(Command::new(env!("CARGO_BIN_EXE_sutra")).args([
        "db",
        "migrate",
        "--db",
        database.owner_url(),
    ]))
}

#[tokio::test]
async fn a_flow_with_a_timer_and_a_receive_completes_on_postgres() {
    let database = TestDatabase::create().await;
    let server = serving(&database).deployed(FLOWS).await;

    let (status, body) = server.send("orders", "o-1", json!({"id": "o1"})).await;
    assert_eq!(status, 202, "{body}");
    let id = instance_id(&body);
    let (_, again) = server.send("orders", "o-1", json!({"id": "o1"})).await;
    assert_eq!(
        (again["instance"].as_str(), again["dedup"].as_bool()),
        (Some(id.as_str()), Some(true))
    );
    // The timer fires durably; the token then parks on the receive.
    server.wait_for_node(&id, "pay").await;
    let (status, body) = server
        .send("payments", "p-1", json!({"order": "o1", "amount": 160}))
        .await;
    assert_eq!(status, 202, "{body}");

    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["payment"]["amount"], 160);
    let history = server.history(&id).await;
    assert_audit_sequence_is_whole(&history);
    let kinds: Vec<&str> = history.iter().filter_map(|e| e["kind"].as_str()).collect();
    for kind in ["started", "timer_fired", "message_received", "completed"] {
        assert!(kinds.contains(&kind), "history lacks {kind}: {kinds:?}");
    }
}

#[tokio::test]
async fn db_migrate_prepares_a_database_for_replicas_that_do_not_migrate() {
    let database = TestDatabase::empty().await;

    let first = db_migrate(&database);
    let again = db_migrate(&database);

    assert!(first.contains("up to date"), "{first}");
    assert_eq!(first, again, "migrating twice changes nothing");
    assert!(
        !first.contains(":sutra@"),
        "the password is not printed: {first}"
    );
    let server = serving(&database)
        .env("SUTRA_STORE_MIGRATE", "false")
        .deployed(FLOWS)
        .await;
    let (status, body) = server.send("orders", "o-1", json!({"id": "o1"})).await;
    assert_eq!(status, 202, "{body}");
}

#[tokio::test]
async fn a_replica_migrates_as_the_owner_and_serves_as_a_role_that_only_reads_and_writes_rows() {
    let database = TestDatabase::empty().await;

    let server =
        Server::start(&serving(&database).env("SUTRA_STORE_MIGRATE_URL", database.owner_url()));

    server.deploy_accepted(FLOWS).await;
    assert!(
        !server
            .stderr_text()
            .contains("row-level security does not bind"),
        "the serving role is bound by row-level security:\n{}",
        server.stderr_text()
    );
}

#[tokio::test]
async fn a_replica_serving_as_the_tables_owner_warns_that_row_security_does_not_bind_it() {
    let database = TestDatabase::create().await;

    let mut server = Server::start(
        &serve!(database.owner_url()).env("SUTRA_STORE_SYSTEM_URL", database.system_url()),
    );

    let warning = server.wait_for_stderr("row-level security does not bind this replica");
    assert!(warning.contains("sutra_owner owns the tables"), "{warning}");
}

/// A server without autovacuum never analyzes the engine's tables, whose statements then keep
/// plans made while the tables were small: a replica says so when it starts, and where
/// autovacuum runs it says nothing of it.
#[tokio::test]
async fn a_replica_warns_when_the_server_does_not_run_autovacuum() {
    let database = TestDatabase::create().await;
    let runs: bool = scalar(
        database.admin_url(),
        "SELECT current_setting('autovacuum')::bool",
    )
    .await
    .unwrap();

    let mut server = Server::start(&serving(&database));

    let warning = "autovacuum is off on this PostgreSQL server";
    match runs {
        false => {
            server.wait_for_stderr(warning);
        }
        true => assert!(!server.stderr_text().contains(warning)),
    }
}

/// A replica whose cross-tenant work would run as a role `'*'` shows no row to would serve
/// tenants and never sweep, fire a timer, send an outbox row or take a lease: it refuses to start
/// and says how to give that work a role.
#[tokio::test]
async fn a_replica_without_a_role_for_its_cross_tenant_work_refuses_to_start() {
    let database = TestDatabase::create().await;

    let alone = serve!(database.serving_url());
    let said = match Server::try_start(&alone) {
        Ok(_) => panic!("sutra serve started without a role for its cross-tenant work"),
        Err(said) => said,
    };
    assert!(said.contains("not a member of sutra_system"), "{said}");
    assert!(said.contains("sutra.store.system-url"), "{said}");
    assert!(
        !said.contains(":sutra@"),
        "the password is not printed: {said}"
    );

    let tenants_only = alone
        .clone()
        .env("SUTRA_STORE_SYSTEM_URL", database.serving_url());
    let said = match Server::try_start(&tenants_only) {
        Ok(_) => panic!("sutra serve started with a system URL of a tenants-only role"),
        Err(said) => said,
    };
    assert!(said.contains("GRANT sutra_system TO its role"), "{said}");
}

/// One role in both groups works, as it did before decision 0040, and is told what it risks.
#[tokio::test]
async fn a_serving_role_that_may_act_for_the_system_is_warned_that_it_reads_every_tenant() {
    let database = TestDatabase::create().await;

    let mut server = Server::start(&serve!(database.url()));

    let warning = server.wait_for_stderr("the serving role is a member of sutra_system");
    assert!(warning.contains("sutra.store.system-url"), "{warning}");
    server.deploy_accepted(FLOWS).await;
}
