//! Migration (SPEC §7.4) through the HTTP API and the CLI, on SQLite and PostgreSQL: the repair
//! story (a version fails an instance, the next fixes it, the instance is migrated onto it and
//! restored), what is refused — and that a refusal, a held claim or a crash mid-migration leaves
//! the instance wholly on one version.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, count_kind, serve, stdout_of};

mod repair;
use repair::{ONTO_V2, V1, V2};

fn map() -> Value {
    json!({"price": "reprice", "wait": "await-reply"})
}

/// Starts order `id` with `amount` on version 1 (deployed alone first).
async fn start_on_v1(server: &Server, id: &str, amount: Value) -> String {
    let (status, body) = server
        .send(
            "orders",
            &format!("evt-{id}"),
            json!({"id": id, "amount": amount}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

async fn migrate(server: &Server, instance: &str, body: Value) -> (u16, Value) {
    server
        .post_json(&format!("/v1/instances/{instance}/migrate"), &body)
        .await
}

/// v1 fails an instance, v2 fixes the flow; migrated and restored, it completes on v2.
async fn the_repair_story(server: &Server, migrate_by_cli: bool) {
    server.deploy_accepted(V1).await;
    let instance = start_on_v1(server, "o1", json!("not a number")).await;
    let failed = server.wait_for_status(&instance, "failed").await;
    assert_eq!(failed["failure"]["code"], "SUTRA.RUNTIME.EXPRESSION.ERROR");
    server.deploy_accepted(V2).await;

    let migrated = if migrate_by_cli {
        let answer = stdout_of(
            std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
                .args(["--server", &server.url(""), "--json", "migrate", &instance])
                .args(ONTO_V2),
        );
        serde_json::from_str(&answer).unwrap()
    } else {
        let (status, body) =
            migrate(server, &instance, json!({"to_version": 2, "map": map()})).await;
        assert_eq!(status, 200, "{body}");
        body
    };
    assert_eq!(
        (migrated["version"].clone(), migrated["status"].clone()),
        (json!(2), json!("failed"))
    );
    assert_eq!(migrated["tokens"][0]["node"], "reprice");

    let (status, body) = server
        .post(&format!("/v1/instances/{instance}/restore"))
        .await;
    assert_eq!(status, 200, "{body}");
    server.wait_for_node(&instance, "await-reply").await;
    let (status, body) = server
        .send("replies", "evt-r1", json!({"id": "ref-o1"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let completed = server.wait_for_status(&instance, "completed").await;
    assert_eq!(completed["version"], 2);
    let history = server.history(&instance).await;
    let moved = history
        .iter()
        .find(|e| e["kind"] == "migrated")
        .expect("a migrated event");
    assert_eq!(moved["detail"], json!({"from": 1, "to": 2, "map": map()}));
}

#[tokio::test]
async fn a_failed_instance_is_repaired_by_migrating_it_onto_the_fix_and_restoring_it_on_sqlite() {
    let scratch = Scratch::new("migration-repair");
    let server = Server::start(&serve!(scratch.database()));
    the_repair_story(&server, true).await;
}

#[tokio::test]
async fn a_failed_instance_is_repaired_by_migrating_it_onto_the_fix_and_restoring_it_on_postgres() {
    let database = TestDatabase::create().await;
    let server = Server::start(&serve!(database.url()));
    the_repair_story(&server, false).await;
}

#[tokio::test]
async fn what_does_not_fit_is_refused_and_changes_nothing() {
    let scratch = Scratch::new("migration-refused");
    let server = serve!(scratch.database()).deployed(V1).await;
    let waiting = start_on_v1(&server, "o1", json!(1)).await;
    server.wait_for_node(&waiting, "wait").await;
    server.deploy_accepted(V2).await;
    let before = server.instance(&waiting).await;
    let history = server.history(&waiting).await.len();

    for (body, code) in [
        (json!({"to_version": 2}), "SUTRA.ADMIN.MIGRATE.INVALID"),
        (
            json!({"to_version": 2, "map": {"wait": "nowhere"}}),
            "SUTRA.ADMIN.MIGRATE.INVALID",
        ),
        (
            json!({"to_version": 2, "map": {"wait": "reprice"}}),
            "SUTRA.ADMIN.MIGRATE.INVALID",
        ),
        (
            json!({"to_version": 7, "map": map()}),
            "SUTRA.ADMIN.MIGRATE.INVALID",
        ),
        (
            json!({"to_version": 2, "mapp": map()}),
            "SUTRA.API.REQUEST.INVALID",
        ),
    ] {
        let (status, answer) = migrate(&server, &waiting, body.clone()).await;
        assert_eq!(answer["code"], code, "{body}: {answer}");
        assert!(status == 422 || status == 400, "{body}: {status}");
        assert!(
            answer["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{answer}"
        );
    }
    assert_eq!(
        server.instance(&waiting).await,
        before,
        "a refusal changes nothing"
    );
    assert_eq!(server.history(&waiting).await.len(), history);

    let (_, body) = server.send("replies", "evt-r1", json!({"id": "o1"})).await;
    assert_eq!(body["status"], "completed", "{body}");
    let (status, answer) = migrate(&server, &waiting, json!({"to_version": 2, "map": map()})).await;
    assert_eq!(
        (status, answer["code"].clone()),
        (409, json!("SUTRA.ADMIN.STATE.INVALID")),
        "{answer}"
    );
}

/// A step of replica `a` stops right after its claim, holding the instance's row lock in its open
/// transaction: replica `b`'s migration is refused at once, having read and written nothing.
// Multi-threaded: the reply is sent from a task of its own while this one blocks on `a`'s stderr.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_migration_of_a_claimed_instance_is_refused_as_claim_held_and_writes_nothing() {
    let database = TestDatabase::create().await;
    let mut stopping = Server::start(
        &serve!(database.url())
            .replica("a")
            .fault("after-claim:stop"),
    );
    let other = Server::start(&serve!(database.url()).replica("b"));
    stopping.deploy_accepted(V1).await;
    let instance = start_on_v1(&stopping, "o1", json!(1)).await;
    stopping.wait_for_node(&instance, "wait").await;
    other.deploy_accepted(V2).await;
    let before = other.instance(&instance).await;

    // The reply's step claims the instance on `a`, which stops there.
    let url = stopping.url("/v1/channels/replies/messages");
    let reply = tokio::spawn(async move {
        let event = sutra_testkit::event("evt-r1", json!({"id": "o1"}));
        reqwest::Client::new().post(url).json(&event).send().await
    });
    stopping.wait_for_stderr("fault point after-claim reached");

    let (status, answer) = migrate(&other, &instance, json!({"to_version": 2, "map": map()})).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["code"], "SUTRA.ADMIN.MIGRATE.CLAIM_HELD");
    assert_eq!(
        other.instance(&instance).await,
        before,
        "nothing was written"
    );

    stopping.thaw();
    let answered = tokio::time::timeout(Duration::from_secs(30), reply).await;
    assert!(
        matches!(answered, Ok(Ok(Ok(_)))),
        "the held step went on: {answered:?}"
    );
    let completed = other.wait_for_status(&instance, "completed").await;
    assert_eq!(
        completed["version"], 1,
        "the step that held the claim ran on version 1"
    );
}

/// SIGKILL at `fault` (`point@hit`) during the migration: the instance is wholly on one version,
/// and answers that version's key.
async fn killed_mid_migration(fault: &str) -> (Scratch, Server, String) {
    let scratch = Scratch::new("migration-killed");
    let options = serve!(scratch.database());
    let mut doomed = options.clone().fault(fault).deployed(V1).await;
    let instance = start_on_v1(&doomed, "o1", json!(1)).await;
    doomed.wait_for_node(&instance, "wait").await;
    doomed.deploy_accepted(V2).await;
    let _ = doomed
        .try_post_json(
            &format!("/v1/instances/{instance}/migrate"),
            &json!({"to_version": 2, "map": map()}),
        )
        .await;
    assert!(doomed.wait_for_death(), "killed at {fault}");
    drop(doomed);
    let server = Server::start(&options);
    (scratch, server, instance)
}

#[tokio::test]
async fn a_migration_killed_before_its_commit_leaves_the_instance_wholly_on_the_old_version() {
    // The start reaches `before-commit` first, the migration second.
    let (_scratch, server, instance) = killed_mid_migration("before-commit@2").await;
    let on = server.instance(&instance).await;
    assert_eq!(
        (on["version"].clone(), on["tokens"][0]["node"].clone()),
        (json!(1), json!("wait"))
    );
    let (_, body) = server
        .send("replies", "evt-new", json!({"id": "ref-o1"}))
        .await;
    assert_eq!(
        body["code"], "SUTRA.RUNTIME.RELAY.NO_MATCH",
        "the new key is not armed: {body}"
    );
    let (_, body) = server.send("replies", "evt-old", json!({"id": "o1"})).await;
    assert_eq!(body["status"], "completed", "the old key is: {body}");
    assert_eq!(count_kind(&server.history(&instance).await, "migrated"), 0);
}

#[tokio::test]
async fn a_migration_killed_after_its_commit_leaves_the_instance_wholly_on_the_new_version() {
    // A start reaches `after-start-commit` instead: the migration is the first here.
    let (_scratch, server, instance) = killed_mid_migration("after-commit").await;
    let on = server.instance(&instance).await;
    assert_eq!(
        (on["version"].clone(), on["tokens"][0]["node"].clone()),
        (json!(2), json!("await-reply"))
    );
    let (_, body) = server.send("replies", "evt-old", json!({"id": "o1"})).await;
    assert_eq!(
        body["code"], "SUTRA.RUNTIME.RELAY.NO_MATCH",
        "the old key is gone: {body}"
    );
    let (_, body) = server
        .send("replies", "evt-new", json!({"id": "ref-o1"}))
        .await;
    assert_eq!(body["status"], "completed", "the new key is armed: {body}");
    assert_eq!(count_kind(&server.history(&instance).await, "migrated"), 1);
}
