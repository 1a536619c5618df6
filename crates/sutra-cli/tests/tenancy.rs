//! Tenant isolation on PostgreSQL (SPEC §1, §4): two tenants with their tokens on one real
//! `sutra serve`, serving as an ordinary role that may act for tenants only, its cross-tenant work
//! done as a role of its own (decision 0040). Whatever tenant B asks about tenant A's rows —
//! through any API call, or through raw queries on the serving role's connection settings with
//! `sutra.tenant` declared as B, or as the system's `'*'` — is answered as if A's rows did not
//! exist, and changes none of them.

use serde_json::{Value, json};
use sqlx::{Connection, PgConnection};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Bearer, Server, serve, until_ok};

const ACME: &str = "acme-all-roles-0123456789abcdef";
const GLOBEX: &str = "globex-all-roles-0123456789abcdef";

/// `pay` waits on a relay, `pick` is a task, `broken` fails the instance, `nightly` is a
/// schedule: every kind of row a tenant can hold.
const SHOP: &str = r#"
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
      - id: check
        choice:
          - when: has(vars.input.broken)
            next: broken
        otherwise: pay
      - id: pay
        receive: { channel: payments, key: vars.input.id, timeout: PT1H, on-timeout: expired }
        output: payment
      - id: pick
        task: { topic: pick, input: { order: "= vars.input.id" } }
      - id: done
        end: {}
      - id: broken
        fail: { code: ORDER.BROKEN, detail: "= 'broken ' + vars.input.id" }
      - id: expired
        fail: { code: ORDER.EXPIRED, detail: "= 'unpaid ' + vars.input.id" }
  nightly:
    start: { schedule: { cron: "0 2 * * *" } }
    nodes:
      - id: tally
        end: {}
"#;

/// Tenant A's rows, as tenant A's token sees them.
struct Acme {
    waiting: String,
    failed: String,
    picking: String,
    task: String,
    lock_token: String,
}

/// Deploys `shop` twice and leaves one instance waiting on a payment (pinned to version 1, so
/// that version stays draining), one failed, and one whose task the worker holds.
async fn acme_with_every_kind_of_row(acme: &Bearer) -> Acme {
    let (status, body) = acme.deploy(SHOP).await;
    assert_eq!(status, 201, "{body}");
    let waiting = started(acme, "o-1", json!({"id": "o1"})).await;
    let (status, body) = acme.deploy(SHOP).await;
    assert_eq!(status, 201, "{body}");
    let failed = started(acme, "o-2", json!({"id": "o2", "broken": true})).await;
    let picking = started(acme, "o-3", json!({"id": "o3"})).await;
    parked_on_payment(acme, &picking).await;
    let (status, body) = acme.send("payments", "p-3", json!({"order": "o3"})).await;
    assert_eq!(status, 202, "{body}");
    scheduled(acme, 2).await;
    let poll = json!({"worker": "acme-worker", "topics": ["pick"], "wait": "PT10S"});
    let (status, tasks) = acme.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = &tasks[0];
    assert_eq!(task["instance"], json!(picking), "{tasks}");
    Acme {
        waiting,
        failed,
        picking,
        task: task["id"].as_str().unwrap().to_owned(),
        lock_token: task["lock_token"].as_str().unwrap().to_owned(),
    }
}

/// Waits until the holder's `nightly` schedule is version `version`'s: the scheduler writes it
/// after the deploy.
async fn scheduled(holder: &Bearer, version: u32) {
    until_ok(async || {
        let (_, listed) = holder.get("/v1/schedules").await;
        (listed["items"][0]["version"] == json!(version))
            .then_some(())
            .ok_or_else(|| format!("version {version}'s schedule never listed: {listed}"))
    })
    .await;
}

async fn started(holder: &Bearer, event: &str, data: Value) -> String {
    let (status, body) = holder.send("orders", event, data).await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// Waits until instance `id` waits on its payment: intake answers before the first step is done.
async fn parked_on_payment(holder: &Bearer, id: &str) {
    until_ok(async || {
        let (_, instance) = holder.get(&format!("/v1/instances/{id}")).await;
        (instance["tokens"][0]["node"] == "pay")
            .then_some(())
            .ok_or_else(|| format!("{id} never waited on pay: {instance}"))
    })
    .await;
}

/// Everything tenant A can read about its rows, to compare before and after.
async fn everything_acme_sees(acme: &Bearer, rows: &Acme) -> Vec<Value> {
    let mut paths = vec![
        "/v1/deployments".to_owned(),
        "/v1/deployments/shop/1".to_owned(),
        "/v1/deployments/shop/2".to_owned(),
        "/v1/instances".to_owned(),
        "/v1/tasks".to_owned(),
        "/v1/schedules".to_owned(),
    ];
    for id in [&rows.waiting, &rows.failed, &rows.picking] {
        for tail in ["", "/history", "/outbox"] {
            paths.push(format!("/v1/instances/{id}{tail}"));
        }
    }
    let mut seen = Vec::new();
    for path in paths {
        let (status, body) = acme.get(&path).await;
        assert_eq!(status, 200, "{path}: {body}");
        seen.push(json!({"path": path, "body": body}));
    }
    seen
}

fn ids(list: &Value) -> Vec<&str> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["id"].as_str().unwrap_or_default())
        .collect()
}

fn assert_not_found(answer: (u16, Value), code: &str, what: &str) {
    let (status, body) = answer;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some(code)),
        "{what}: {body}"
    );
}

#[tokio::test]
async fn no_api_call_and_no_raw_query_of_one_tenant_reads_or_changes_anothers_rows() {
    let database = TestDatabase::create().await;
    let tokens = format!("acme:admin,worker,sender:{ACME}; globex:admin,worker,sender:{GLOBEX}");
    let options = serve!(database.serving_url())
        .env("SUTRA_STORE_SYSTEM_URL", database.system_url())
        .tokens(&tokens);
    let server = Server::start(&options);
    let (acme, globex) = (server.bearer(ACME), server.bearer(GLOBEX));
    let rows = acme_with_every_kind_of_row(&acme).await;
    let before = everything_acme_sees(&acme, &rows).await;

    b_deploys_beside_a_and_never_over_it(&globex).await;
    b_lists_only_its_own_rows(&globex, &rows).await;
    b_pauses_only_its_own_schedule(&globex).await;
    b_cannot_show_or_administer_as_instances(&globex, &rows).await;
    b_cannot_take_or_answer_as_tasks(&globex, &rows).await;
    b_cannot_relay_to_or_replay_as_messages(&globex, &rows).await;
    b_on_the_engines_connection_reaches_none_of_as_rows(&database, "globex").await;
    b_on_the_engines_connection_reaches_none_of_as_rows(&database, "*").await;

    assert_eq!(
        everything_acme_sees(&acme, &rows).await,
        before,
        "A's rows are as they were"
    );
    let (status, body) = acme
        .post_json(
            &format!("/v1/tasks/{}/complete", rows.task),
            &json!({"lock_token": rows.lock_token, "output": {}}),
        )
        .await;
    assert_eq!(status, 200, "A's worker still holds its task: {body}");
}

/// Deploying the same name makes B's own version 1; a document naming A is refused.
async fn b_deploys_beside_a_and_never_over_it(globex: &Bearer) {
    let (status, body) = globex.deploy(SHOP).await;
    assert_eq!(
        (status, &body["tenant"], &body["version"]),
        (201, &json!("globex"), &json!(1)),
        "{body}"
    );
    let (status, body) = globex.deploy(&format!("tenant: acme\n{SHOP}")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (403, Some("SUTRA.AUTH.FORBIDDEN")),
        "{body}"
    );
    let (status, body) = globex.get("/v1/deployments").await;
    let tenants: Vec<&Value> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["tenant"])
        .collect();
    assert_eq!((status, tenants), (200, vec![&json!("globex")]), "{body}");
    assert_not_found(
        globex.get("/v1/deployments/shop/2").await,
        "SUTRA.DEPLOY.NOT_FOUND",
        "A's version 2",
    );
}

async fn b_lists_only_its_own_rows(globex: &Bearer, rows: &Acme) {
    let (_, instances) = globex.get("/v1/instances").await;
    let (_, failed) = globex.get("/v1/instances?status=failed").await;
    let (_, tasks) = globex.get("/v1/tasks").await;
    for list in [&instances, &failed, &tasks] {
        let listed = ids(list);
        assert!(
            [&rows.waiting, &rows.failed, &rows.picking, &rows.task]
                .iter()
                .all(|a| !listed.contains(&a.as_str())),
            "{list}"
        );
    }
}

/// B's schedule of the same name is its own: pausing it leaves A's running (A's view, compared
/// at the end, still says so).
async fn b_pauses_only_its_own_schedule(globex: &Bearer) {
    scheduled(globex, 1).await;
    let (status, body) = globex.post("/v1/schedules/shop/nightly/pause").await;
    assert_eq!(
        (status, &body["paused"], &body["version"]),
        (200, &json!(true), &json!(1)),
        "{body}"
    );
    assert_not_found(
        globex.post("/v1/schedules/shop/order/pause").await,
        "SUTRA.SCHEDULE.NOT_FOUND",
        "a flow with no schedule",
    );
}

async fn b_cannot_show_or_administer_as_instances(globex: &Bearer, rows: &Acme) {
    for id in [&rows.waiting, &rows.failed, &rows.picking] {
        for tail in ["", "/history", "/outbox"] {
            let path = format!("/v1/instances/{id}{tail}");
            assert_not_found(globex.get(&path).await, "SUTRA.INSTANCE.NOT_FOUND", &path);
        }
        for action in ["cancel", "restore"] {
            let path = format!("/v1/instances/{id}/{action}");
            assert_not_found(globex.post(&path).await, "SUTRA.INSTANCE.NOT_FOUND", &path);
        }
    }
}

async fn b_cannot_take_or_answer_as_tasks(globex: &Bearer, rows: &Acme) {
    let poll = json!({"worker": "globex-worker", "topics": ["pick"], "max": 10});
    let (status, taken) = globex.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!((status, taken), (200, json!([])));
    let answers = [
        (
            "complete",
            json!({"lock_token": rows.lock_token, "output": {"stolen": true}}),
        ),
        (
            "fail",
            json!({"lock_token": rows.lock_token, "error": {"code": "X"}, "retry": false}),
        ),
        (
            "extend",
            json!({"lock_token": rows.lock_token, "lock": "PT1H"}),
        ),
    ];
    for (answer, body) in answers {
        let path = format!("/v1/tasks/{}/{answer}", rows.task);
        assert_not_found(
            globex.post_json(&path, &body).await,
            "SUTRA.TASK.NOT_FOUND",
            &path,
        );
    }
    let batch =
        json!([{"id": rows.task, "lock_token": rows.lock_token, "output": {"stolen": true}}]);
    let (status, body) = globex.post_json("/v1/tasks/complete", &batch).await;
    assert_eq!(
        (status, body["items"][0]["error"]["code"].as_str()),
        (200, Some("SUTRA.TASK.NOT_FOUND")),
        "{body}"
    );
}

/// A's wait on `o1` is invisible to B's relay, and A's consumed event ids to B's dedup.
async fn b_cannot_relay_to_or_replay_as_messages(globex: &Bearer, rows: &Acme) {
    let (status, body) = globex.send("payments", "p-1", json!({"order": "o1"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("SUTRA.RUNTIME.RELAY.NO_MATCH")),
        "{body}"
    );
    let (status, body) = globex.send("orders", "o-1", json!({"id": "o1"})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        body["dedup"],
        json!(false),
        "A's event id is no duplicate for B: {body}"
    );
    assert_ne!(body["instance"], json!(rows.waiting), "{body}");
}

const TABLES: [&str; 10] = [
    "deployments",
    "instances",
    "waits",
    "deliveries",
    "tasks",
    "inbox",
    "buffered",
    "outbox",
    "history",
    "schedules",
];

/// The serving role with `sutra.tenant` declared as B (as the store declares it) or as the
/// system's `'*'`, in one transaction: every statement at A's rows reads nothing and changes
/// nothing, and row security cannot be switched off — only the tables' owner could.
async fn b_on_the_engines_connection_reaches_none_of_as_rows(
    database: &TestDatabase,
    declared: &str,
) {
    let mut engine = PgConnection::connect(database.serving_url()).await.unwrap();
    execute(&mut engine, "BEGIN").await.unwrap();
    sqlx::query("SELECT set_config('sutra.tenant', $1, true)")
        .bind(declared)
        .execute(&mut engine)
        .await
        .unwrap();
    let own: i64 = sqlx::query_scalar("SELECT count(*) FROM instances")
        .fetch_one(&mut engine)
        .await
        .unwrap();
    let declared_globex = declared == "globex";
    assert_eq!(
        own > 0,
        declared_globex,
        "B's own rows are visible as B (the declaration took), none as '*'"
    );

    for table in TABLES {
        let acme = "tenant = 'acme'";
        let read = format!("SELECT count(*) FROM {table} WHERE {acme} OR tenant <> 'globex'");
        let seen: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(read))
            .fetch_one(&mut engine)
            .await
            .unwrap();
        assert_eq!(seen, 0, "{table}: read");
        let update = format!("UPDATE {table} SET tenant = tenant WHERE {acme}");
        assert_eq!(
            attempt(&mut engine, &update).await,
            Ok(0),
            "{table}: update"
        );
        let delete = format!("DELETE FROM {table} WHERE {acme}");
        assert_eq!(
            attempt(&mut engine, &delete).await,
            Ok(0),
            "{table}: delete"
        );
        let disable = format!("ALTER TABLE {table} DISABLE ROW LEVEL SECURITY");
        assert_eq!(
            attempt(&mut engine, &disable).await,
            Err("42501".to_owned()),
            "{table}: disable"
        );
    }
    let no_policies = "SET LOCAL row_security = off";
    execute(&mut engine, no_policies).await.unwrap();
    assert_eq!(
        attempt(&mut engine, "SELECT count(*) FROM instances").await,
        Err("42501".to_owned()),
        "without policies a query is refused, not widened"
    );
    execute(&mut engine, "COMMIT").await.unwrap();
}

async fn execute(connection: &mut PgConnection, sql: &str) -> sqlx::Result<u64> {
    let done = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(connection)
        .await?;
    Ok(done.rows_affected())
}

/// Rows `sql` touched, or the SQLSTATE it was refused with; either way the transaction goes on.
async fn attempt(connection: &mut PgConnection, sql: &str) -> Result<u64, String> {
    execute(connection, "SAVEPOINT attempt").await.unwrap();
    let outcome = execute(connection, sql).await.map_err(|e| {
        e.as_database_error()
            .and_then(|e| e.code())
            .map_or_else(|| e.to_string(), |code| code.into_owned())
    });
    execute(connection, "ROLLBACK TO SAVEPOINT attempt")
        .await
        .unwrap();
    outcome
}
