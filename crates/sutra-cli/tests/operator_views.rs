//! The operator views per tenant (decision 0076), through a real `sutra serve` with tokens for
//! two tenants and the operator — on SQLite and on PostgreSQL wherever the store counts. A
//! tenant's administrator reads its own figures on `GET /v1/scaling` and `GET
//! /v1/system/history`, and nothing of the other tenant's: no flow, topic or channel name, no
//! count. The operator reads the fleet's. `/metrics` names nothing a tenant chose unless
//! `sutra.metrics.tenant-labels` asks for it, and then answers the operator alone, with every
//! deployed flow at zero before its first step.

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Bearer, Scratch, Server, ServerOptions, metric_value, serve, until_ok};

const ACME: &str = "acme-admin-0123456789abcdef";
const ACME_WORKER: &str = "acme-worker-0123456789abcdef";
const GLOBEX: &str = "globex-admin-0123456789abcdef";
const OPERATOR: &str = "operator-0123456789abcdef";

/// Everything acme chose is named `acme-…`: any of it shown to globex has the tenant's name in it.
const ACME_SHOP: &str = r#"
name: acme-shop
channels:
  acme-orders: { transport: http, correlate: data.id }
  acme-returns: { transport: http }
flows:
  acme-checkout:
    start: { channel: acme-orders }
    nodes:
      - id: route
        choice:
          - when: vars.input.kind == "fail"
            next: broken
        otherwise: pick
      - id: pick
        task: { topic: acme-picking, input: {} }
        next: done
      - id: broken
        fail: { code: ORDER.BROKEN, detail: broken on purpose }
      - id: done
        end: {}
  acme-never-run:
    start: { channel: acme-returns }
    nodes:
      - id: done
        end: {}
"#;

const GLOBEX_SHOP: &str = r#"
name: globex-shop
channels:
  globex-orders: { transport: http }
flows:
  globex-checkout:
    start: { channel: globex-orders }
    nodes:
      - id: done
        end: {}
"#;

/// Two tenants, the acme administrator with a worker beside it, and the operator.
fn guarded(datasource: &str) -> ServerOptions {
    serve!(datasource).tokens(&format!(
        "acme:admin,sender:{ACME}; acme:worker:{ACME_WORKER}; globex:admin,sender:{GLOBEX}; \
         :operator:{OPERATOR}"
    ))
}

/// Acme leaves two instances parked on a task and one failed, in three committed steps; globex
/// one completed instance, in one.
async fn two_tenants_at_work(server: &Server) {
    let (acme, globex) = (server.bearer(ACME), server.bearer(GLOBEX));
    for (holder, shop) in [(&acme, ACME_SHOP), (&globex, GLOBEX_SHOP)] {
        let (status, body) = holder.deploy(shop).await;
        assert_eq!(status, 201, "{body}");
    }
    for (id, kind) in [("a1", "task"), ("a2", "task"), ("a3", "fail")] {
        let data = json!({"id": id, "kind": kind});
        let (status, body) = acme.send("acme-orders", &format!("e-{id}"), data).await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, body) = globex.send("globex-orders", "e-g1", json!({})).await;
    assert_eq!(status, 202, "{body}");
}

/// What `holder` reads on `GET /v1/scaling`, once it is `expected`: intake answers before the
/// first step is done.
async fn scaling_once(holder: &Bearer, expected: &Value) -> Value {
    until_ok(async || {
        let (status, scaling) = holder.get("/v1/scaling").await;
        (status == 200 && scaling == *expected)
            .then(|| scaling.clone())
            .ok_or_else(|| format!("{status} {scaling}, not {expected}"))
    })
    .await
}

/// What `holder` reads on `GET /v1/system/history`, once its samples count `steps` committed
/// steps in all: the replica samples every 10 s.
async fn history_once(holder: &Bearer, steps: u64) -> Value {
    until_ok(async || {
        let (status, history) = holder.get("/v1/system/history").await;
        let counted = total(&history, "steps");
        (status == 200 && counted == steps)
            .then(|| history.clone())
            .ok_or_else(|| format!("{counted} steps, not {steps}, in {status} {history}"))
    })
    .await
}

/// The sum of `field` over a history's samples.
fn total(history: &Value, field: &str) -> u64 {
    let samples = history["samples"].as_array().into_iter().flatten();
    samples.filter_map(|sample| sample[field].as_u64()).sum()
}

/// Whether any sample of a history holds a backlog.
fn any_backlog(history: &Value) -> bool {
    let samples = history["samples"].as_array().into_iter().flatten();
    samples
        .flat_map(|sample| {
            ["inbox_backlog", "outbox_backlog", "tasks_available"].map(|f| &sample[f])
        })
        .any(|figure| !figure.is_null())
}

async fn a_tenants_views_show_nothing_of_another_tenants(server: &Server) {
    two_tenants_at_work(server).await;
    let (acme, globex) = (server.bearer(ACME), server.bearer(GLOBEX));

    let theirs = scaling_once(
        &globex,
        &json!({
            "tenant": "globex",
            "inbox_backlog": 0,
            "outbox_backlog": 0,
            "tasks_available": {},
            "tasks_locked": 0,
            "instances": {"completed": 1},
            "claims_in_flight": 0,
        }),
    )
    .await;
    scaling_once(
        &acme,
        &json!({
            "tenant": "acme",
            "inbox_backlog": 0,
            "outbox_backlog": 0,
            "tasks_available": {"acme-picking": 2},
            "tasks_locked": 0,
            "instances": {"failed": 1, "suspended": 2},
            "claims_in_flight": 0,
        }),
    )
    .await;
    let history = history_once(&globex, 1).await;
    assert_eq!(history["tenant"], "globex", "{history}");
    assert_eq!(total(&history, "instances_failed"), 0, "{history}");
    assert!(!any_backlog(&history), "the fleet's backlog: {history}");
    let own = history_once(&acme, 3).await;
    assert_eq!(total(&own, "instances_failed"), 1, "{own}");
    let (status, metrics) = server.bearer(GLOBEX).text("/metrics").await;
    assert_eq!(status, 200, "{metrics}");

    for (what, answer) in [
        ("/v1/scaling", theirs.to_string()),
        ("/v1/system/history", history.to_string()),
        ("/metrics", metrics),
    ] {
        assert!(!answer.contains("acme"), "{what} shows acme's: {answer}");
    }
}

#[tokio::test]
async fn a_tenants_views_show_nothing_of_another_tenants_on_sqlite() {
    let scratch = Scratch::new("views-per-tenant");
    let server = Server::start(&guarded(&scratch.database()));
    a_tenants_views_show_nothing_of_another_tenants(&server).await;
}

#[tokio::test]
async fn a_tenants_views_show_nothing_of_another_tenants_on_postgres() {
    let database = TestDatabase::create().await;
    let server = Server::start(&guarded(database.url()));
    a_tenants_views_show_nothing_of_another_tenants(&server).await;
}

async fn the_operator_sees_the_fleet_and_no_tenants_rows(server: &Server) {
    two_tenants_at_work(server).await;
    let operator = server.bearer(OPERATOR);

    scaling_once(
        &operator,
        &json!({
            "tenant": null,
            "inbox_backlog": 0,
            "outbox_backlog": 0,
            "tasks_available": {"acme-picking": 2},
            "tasks_locked": 0,
            "instances": {"completed": 1, "failed": 1, "suspended": 2},
            "claims_in_flight": 0,
        }),
    )
    .await;
    let history = history_once(&operator, 4).await;
    assert_eq!(history["tenant"], Value::Null, "{history}");
    assert_eq!(total(&history, "instances_failed"), 1, "{history}");
    assert!(any_backlog(&history), "the fleet's backlog: {history}");
    let (status, leases) = operator.get("/v1/leases").await;
    assert_eq!(status, 200, "{leases}");

    // The operator acts for no tenant: a tenant's routes refuse it, and the views refuse a
    // tenant's token without the administrator's role.
    let (status, refusal) = operator.get("/v1/instances").await;
    assert_eq!(
        (status, refusal["code"].as_str()),
        (403, Some("SUTRA.AUTH.FORBIDDEN")),
        "{refusal}"
    );
    let (status, refusal) = server.bearer(ACME_WORKER).get("/v1/scaling").await;
    assert_eq!(status, 403, "{refusal}");
    let detail = refusal["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("needs the `admin` or `operator` role"),
        "{detail}"
    );
}

#[tokio::test]
async fn the_operator_sees_the_fleet_and_no_tenants_rows_on_sqlite() {
    let scratch = Scratch::new("views-operator");
    let server = Server::start(&guarded(&scratch.database()));
    the_operator_sees_the_fleet_and_no_tenants_rows(&server).await;
}

#[tokio::test]
async fn the_operator_sees_the_fleet_and_no_tenants_rows_on_postgres() {
    let database = TestDatabase::create().await;
    let server = Server::start(&guarded(database.url()));
    the_operator_sees_the_fleet_and_no_tenants_rows(&server).await;
}

#[tokio::test]
async fn metrics_name_nothing_a_tenant_chose_by_default() {
    let scratch = Scratch::new("metrics-folded");
    let server = Server::start(&guarded(&scratch.database()));
    two_tenants_at_work(&server).await;
    // Without a token, as any scraper: acme's two tasks and everyone's four steps, folded.
    let expected = [
        ("sutra_steps_total{outcome=\"committed\"}", 4.0),
        ("sutra_tasks_available", 2.0),
    ];
    let metrics = until_ok(async || {
        let answer = server.http.get(server.url("/metrics")).send().await;
        let metrics = answer.unwrap().text().await.unwrap();
        match expected
            .iter()
            .find(|(series, value)| metric_value(&metrics, series) != Some(*value))
        {
            Some((series, value)) => Err(format!("{series} is not {value} in:\n{metrics}")),
            None => Ok(metrics),
        }
    })
    .await;

    for named in ["acme", "globex", "flow=", "topic=", "tenant="] {
        assert!(!metrics.contains(named), "{named} in:\n{metrics}");
    }
}

/// The series of `flow`'s committed steps, as the operator asked for them.
fn committed(flow: &str) -> String {
    format!("sutra_steps_total{{tenant=\"acme\",flow=\"{flow}\",outcome=\"committed\"}}")
}

#[tokio::test]
async fn with_tenant_labels_a_flow_deployed_but_never_run_is_exported_at_zero() {
    let scratch = Scratch::new("metrics-per-tenant");
    let options = guarded(&scratch.database()).env("SUTRA_METRICS_TENANT_LABELS", "true");
    let mut server = Server::start(&options);
    let (status, body) = server.bearer(ACME).deploy(ACME_SHOP).await;
    assert_eq!(status, 201, "{body}");

    // The names are the operator's to read, and no one else's.
    let answer = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 401);
    let (status, _) = server.bearer(ACME).text("/metrics").await;
    assert_eq!(status, 403, "a tenant's administrator");
    let (status, metrics) = server.bearer(OPERATOR).text("/metrics").await;
    assert_eq!(status, 200, "{metrics}");
    for flow in ["acme-checkout", "acme-never-run"] {
        assert_eq!(
            metric_value(&metrics, &committed(flow)),
            Some(0.0),
            "{flow} in:\n{metrics}"
        );
    }

    let data = json!({"id": "a1", "kind": "task"});
    let (status, body) = server.bearer(ACME).send("acme-orders", "e-a1", data).await;
    assert_eq!(status, 202, "{body}");
    let task = "sutra_tasks_available{tenant=\"acme\",topic=\"acme-picking\"}";
    until_ok(async || {
        let (_, metrics) = server.bearer(OPERATOR).text("/metrics").await;
        let seen = [committed("acme-checkout"), task.to_owned()]
            .map(|series| metric_value(&metrics, &series));
        (seen == [Some(1.0), Some(1.0)])
            .then_some(())
            .ok_or_else(|| format!("{seen:?} in:\n{metrics}"))
    })
    .await;

    // A replica that starts exports what it loads, before any step.
    server.stop();
    let server = Server::start(&options);
    let (_, metrics) = server.bearer(OPERATOR).text("/metrics").await;
    assert_eq!(
        metric_value(&metrics, &committed("acme-never-run")),
        Some(0.0),
        "{metrics}"
    );
}
