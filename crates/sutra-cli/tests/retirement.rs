//! The retirement gate (SPEC §7.3), through the HTTP API: a draining version says what keeps it
//! — its unended instances, its pending outbox rows, its live tasks — each count falls as its
//! blocker is resolved, and the version retires only once all three are zero; on PostgreSQL
//! every replica gives the same answer. The embedded store's run of the same story is in the
//! engine's in-process tier (`crates/sutra-engine/tests/retirement.rs`), on a manual clock.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Receiver, Server, ServerOptions, serve, until_ok};

/// Version 1: each order does what its `kind` says — wait for a reply, park on a task, fail, or
/// emit to a webhook that refuses its first tries — and version 2 is the same document again.
fn shop(webhook: &str) -> String {
    format!(
        r#"
name: shop
channels:
  orders: {{ transport: http, correlate: data.id }}
  replies: {{ transport: http, correlate: data.id }}
  ledger: {{ transport: http, url: "{webhook}" }}
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
        task: {{ topic: retirement-work, input: {{}} }}
        next: done
      - id: broken
        fail: {{ code: ORDER.BROKEN, detail: broken on purpose }}
      - id: notify
        emit: {{ channel: ledger, data: {{ order: "= vars.input.id" }} }}
        next: done
      - id: done
        end: {{}}
"#
    )
}

fn options(datasource: &str) -> ServerOptions {
    serve!(datasource)
        .env("SUTRA_DEPLOYMENTS_RETIRE_INTERVAL", "PT0.2S")
        // A version retires no sooner than a claim timeout after its successor was stored.
        .claim_timeout(Duration::from_secs(1))
        // The webhook refuses three tries, two seconds apart and doubling: pending for ~14 s.
        .env("SUTRA_OUTBOX_BACKOFF", "PT2S")
}

async fn start(server: &Server, id: &str, kind: &str) -> String {
    let (status, body) = server
        .send(
            "orders",
            &format!("evt-{id}"),
            json!({"id": id, "kind": kind}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// Version 1 as `server` answers for it: its status and what keeps it.
async fn version_1(server: &Server) -> (String, Value) {
    let (status, body) = server.get("/v1/deployments/shop/1").await;
    assert_eq!(status, 200, "{body}");
    (
        body["status"].as_str().unwrap().to_owned(),
        body["retirement"].clone(),
    )
}

/// Polls until every server says version 1 is kept by exactly `blockers`, or is `status`.
async fn until_every_replica_says(servers: &[&Server], status: &str, blockers: Value) {
    until_ok(async || {
        let mut answers = Vec::new();
        for server in servers {
            answers.push(version_1(server).await);
        }
        let said = |answer: &(String, Value)| answer.0 == status && answer.1 == blockers;
        (answers.iter().all(said))
            .then_some(())
            .ok_or_else(|| format!("version 1 is not {status} kept by {blockers}: {answers:?}"))
    })
    .await;
}

/// Drives the gate's story on `servers` (one store): the first is where requests go.
async fn the_gate_opens_only_when_nothing_keeps_the_version(servers: &[&Server]) {
    let server = servers[0];
    let webhook = Receiver::start(&[500, 500, 500], 200);
    server.deploy_accepted(&shop(&webhook.url("/ledger"))).await;
    start(server, "o-emit", "emit").await;
    let waiting = start(server, "o-wait", "wait").await;
    let tasked = start(server, "o-task", "task").await;
    let failed = start(server, "o-fail", "fail").await;
    server.wait_for_status(&failed, "failed").await;
    let body = server.deploy_accepted(&shop(&webhook.url("/ledger"))).await;
    assert_eq!(body["version"], 2);

    let kept = |instances: u64, outbox: u64, tasks: u64| json!({"instances": instances, "outbox": outbox, "tasks": tasks});
    until_every_replica_says(servers, "draining", kept(3, 1, 1)).await;

    let (status, body) = server
        .send("replies", "evt-reply", json!({"id": "o-wait"}))
        .await;
    assert_eq!(status, 202, "{body}");
    server.wait_for_status(&waiting, "completed").await;
    until_every_replica_says(servers, "draining", kept(2, 1, 1)).await;

    let poll = json!({"worker": "w", "topics": ["retirement-work"], "wait": "PT10S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = &tasks[0];
    let id = task["id"].as_str().unwrap();
    let done = json!({"lock_token": task["lock_token"], "output": {}});
    let (status, body) = server
        .post_json(&format!("/v1/tasks/{id}/complete"), &done)
        .await;
    assert_eq!(status, 200, "{body}");
    server.wait_for_status(&tasked, "completed").await;
    until_every_replica_says(servers, "draining", kept(1, 1, 0)).await;

    let (status, body) = server.post(&format!("/v1/instances/{failed}/cancel")).await;
    assert_eq!(status, 200, "{body}");
    // Only the outbox row keeps it now, until the webhook takes it.
    until_every_replica_says(servers, "draining", kept(0, 1, 0)).await;
    webhook.wait_for(4).await;
    until_every_replica_says(servers, "retired", Value::Null).await;
}

#[tokio::test]
async fn a_draining_version_retires_only_once_nothing_keeps_it_and_every_replica_says_so_on_postgres()
 {
    let database = TestDatabase::create().await;
    let replica = |id: &str| {
        Server::start(
            &options(database.url())
                .replica(id)
                .leases(Duration::from_secs(3), Duration::from_millis(500)),
        )
    };
    let (first, second) = (replica("a"), replica("b"));
    the_gate_opens_only_when_nothing_keeps_the_version(&[&first, &second]).await;
}

/// An order that emits to `webhook` on a channel that gives up after two tries.
fn giving_up(webhook: &str) -> String {
    format!(
        r#"
name: shop
channels:
  orders: {{ transport: http, correlate: data.id }}
  ledger: {{ transport: http, url: "{webhook}", max-attempts: 2 }}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: notify
        emit: {{ channel: ledger, data: {{ order: "= vars.input.id" }} }}
      - id: done
        end: {{}}
"#
    )
}

#[tokio::test]
async fn a_poisoned_outbox_row_no_longer_keeps_its_draining_version_on_postgres() {
    let database = TestDatabase::create().await;
    let server = Server::start(&options(database.url()));
    let webhook = Receiver::start(&[], 500);
    let document = giving_up(&webhook.url("/ledger"));
    server.deploy_accepted(&document).await;
    let emitting = start(&server, "o-emit", "emit").await;
    server.wait_for_status(&emitting, "completed").await;
    server.deploy_accepted(&document).await;

    // Refused twice, the row reaches the channel's `max-attempts`: poisoned, kept, never sent.
    let rows = server.wait_for_outbox(&emitting, "poisoned").await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(webhook.received().len(), 2);
    until_every_replica_says(&[&server], "retired", Value::Null).await;
}
