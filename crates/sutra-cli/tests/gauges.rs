//! The scaling signal (SPEC §8) against a known state, on SQLite and PostgreSQL: `/metrics`
//! exports each gauge with the value the database holds, and `GET /v1/scaling` answers the same.

use serde_json::json;
use sutra_store_sql::scaling::SCALING_SIGNAL;
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, ServerOptions, metric_value, serve, until_ok};

/// Each order does what its `kind` says: park on a task, fail, emit to a port nobody listens on,
/// or wait for a reply (which may come before it parks: `buffer`).
fn shop(closed: &str) -> String {
    format!(
        r#"
name: gauges
channels:
  orders: {{ transport: http, correlate: data.id }}
  replies: {{ transport: http, correlate: data.id, buffer: PT1H }}
  ledger: {{ transport: http, url: "{closed}" }}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: route
        choice:
          - when: vars.input.kind == "task"
            next: work
          - when: vars.input.kind == "fail"
            next: broken
          - when: vars.input.kind == "emit"
            next: notify
        otherwise: wait
      - id: wait
        receive: {{ channel: replies, key: vars.input.id }}
        next: done
      - id: work
        task: {{ topic: gauge-work, input: {{}} }}
        next: done
      - id: broken
        fail: {{ code: ORDER.BROKEN, detail: broken on purpose }}
      - id: notify
        emit: {{ channel: ledger, data: {{}} }}
        next: done
      - id: done
        end: {{}}
"#
    )
}

fn options(datasource: &str) -> ServerOptions {
    // A failed send waits an hour before its next try: the row stays pending.
    serve!(datasource).env("SUTRA_OUTBOX_BACKOFF", "PT1H")
}

/// What `GET /metrics` answers.
async fn metrics(server: &Server) -> String {
    let answer = server.http.get(server.url("/metrics")).send().await;
    answer.unwrap().text().await.unwrap()
}

async fn a_known_state_is_what_the_gauges_say(server: &Server) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = format!("http://{}/gone", closed.local_addr().unwrap());
    server.deploy_accepted(&shop(&closed)).await;
    for (id, kind) in [
        ("o-task1", "task"),
        ("o-task2", "task"),
        ("o-wait", "wait"),
        ("o-fail", "fail"),
        ("o-emit", "emit"),
    ] {
        let (status, body) = server
            .send(
                "orders",
                &format!("evt-{id}"),
                json!({"id": id, "kind": kind}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, body) = server
        .send("replies", "evt-early", json!({"id": "nobody-yet"}))
        .await;
    assert_eq!(
        (status, body["status"].clone()),
        (202, json!("buffered")),
        "{body}"
    );
    let poll = json!({"worker": "w", "topics": ["gauge-work"], "max": 1});
    let (status, locked) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(
        (status, locked.as_array().map(Vec::len)),
        (200, Some(1)),
        "{locked}"
    );
    // The emit's one try failed: the row waits for its next.
    until_ok(async || {
        let (_, scaling) = server.get("/v1/scaling").await;
        (scaling["outbox_backlog"] == 1)
            .then_some(())
            .ok_or_else(|| scaling.to_string())
    })
    .await;

    let (status, scaling) = server.get("/v1/scaling").await;
    assert_eq!(status, 200, "{scaling}");
    assert_eq!(
        scaling,
        json!({
            "tenant": null,
            "inbox_backlog": 1,
            "outbox_backlog": 1,
            "tasks_available": {"gauge-work": 1},
            "tasks_locked": 1,
            "instances": {"completed": 1, "failed": 1, "suspended": 3},
            "claims_in_flight": 0,
        })
    );
    let expected: [(&str, f64); 10] = [
        ("sutra_inbox_backlog", 1.0),
        ("sutra_outbox_backlog", 1.0),
        ("sutra_tasks_available", 1.0),
        ("sutra_tasks_locked", 1.0),
        ("sutra_instances{status=\"suspended\"}", 3.0),
        ("sutra_instances{status=\"failed\"}", 1.0),
        ("sutra_instances{status=\"completed\"}", 1.0),
        ("sutra_instances{status=\"cancelled\"}", 0.0),
        ("sutra_claims_in_flight", 0.0),
        ("sutra_lane_queue_depth{lane=\"0\"}", 0.0),
    ];
    // A scrape reads the backlog as last counted, at most one sample interval (10 s) ago
    // (decision 0065): the gauges say the state above by the next count at the latest.
    let metrics = until_ok(async || {
        let metrics = metrics(server).await;
        match expected
            .iter()
            .find(|(series, value)| metric_value(&metrics, series) != Some(*value))
        {
            Some((series, value)) => Err(format!("{series} is not {value} in:\n{metrics}")),
            None => Ok(metrics),
        }
    })
    .await;
    assert!(
        metrics.contains("# HELP sutra_instances Instances by status. Exact for created"),
        "{metrics}"
    );
}

#[tokio::test]
async fn the_gauges_say_what_the_embedded_store_holds() {
    let scratch = Scratch::new("gauges");
    let server = Server::start(&options(&scratch.database()));
    a_known_state_is_what_the_gauges_say(&server).await;
}

#[tokio::test]
async fn the_gauges_say_what_postgres_holds() {
    let database = TestDatabase::create().await;
    let server = Server::start(&options(database.url()));
    a_known_state_is_what_the_gauges_say(&server).await;
    // What KEDA's PostgreSQL scaler runs (deploy/keda/scaledobject.yaml), as a role that sees
    // every tenant's rows: one buffered message, one pending row, one available task and one
    // locked.
    let waiting: i64 = sutra_testkit::postgres::scalar(database.admin_url(), SCALING_SIGNAL)
        .await
        .unwrap();
    assert_eq!(waiting, 4);
}

/// An alert on a counter needs a value to read on a healthy replica, before its first event.
/// By default no series has a label a tenant chose (decision 0076), so every one is known at
/// start.
#[tokio::test]
async fn a_fresh_server_exports_every_series_at_zero() {
    let scratch = Scratch::new("fresh-metrics");
    let server = Server::start(&options(&scratch.database()));
    let metrics = metrics(&server).await;

    for series in sutra_engine::metrics::SERIES {
        assert!(
            metrics.contains(&format!("# TYPE {series} ")),
            "{series} in:\n{metrics}"
        );
    }
    for path in ["relay", "timer", "admin"] {
        let series = format!("sutra_claim_bounces_total{{path=\"{path}\"}}");
        assert_eq!(
            metric_value(&metrics, &series),
            Some(0.0),
            "{series} in:\n{metrics}"
        );
    }
    assert_eq!(
        metric_value(&metrics, "sutra_sweeps_cleared_total"),
        Some(0.0)
    );
    for outcome in ["committed", "failed", "panicked"] {
        let series = format!("sutra_steps_total{{outcome=\"{outcome}\"}}");
        assert_eq!(
            metric_value(&metrics, &series),
            Some(0.0),
            "{series} in:\n{metrics}"
        );
    }
    assert_eq!(metric_value(&metrics, "sutra_tasks_available"), Some(0.0));
}
