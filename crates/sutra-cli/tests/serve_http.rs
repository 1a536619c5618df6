//! End-to-end: a real `sutra serve` process on the embedded store, driven only over HTTP.
//!
//! Every node kind that needs no worker, every intake refusal, dedup, buffering, durable
//! timers, failure and restore, cancel, and version pinning.

use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, assert_audit_sequence_is_whole, serve};

const FLOWS: &str = r#"
name: shop
channels:
  orders:
    transport: http
    schema: { type: object, required: [id, amount], properties: { amount: { type: number } } }
    correlate: data.id
  payments:
    transport: http
    correlate: data.order
  checkout:
    transport: http
    correlate: data.id
    ack: complete
    ack-timeout: PT20S
  early:
    transport: http
    correlate: data.id
    buffer: PT1M
  early-start:
    transport: http
    correlate: data.id
  ledger:
    transport: http
    url: http://127.0.0.1:9/ledger
  gates:
    transport: http
    correlate: data.id
  refusals:
    transport: http
    correlate: data.id
    ack: complete
  handoffs:
    transport: http
    correlate: data.id
flows:
  handoff:
    start: { channel: handoffs }
    nodes:
      - id: await-next
        receive: { channel: handoffs, key: vars.input.next }
        output: next
      - id: handed
        end: {}
  refuse:
    start: { channel: refusals }
    nodes:
      - id: no
        fail: { code: ORDER.REFUSED, detail: "= 'refused ' + vars.input.id" }
  gate:
    start: { channel: gates }
    nodes:
      - id: decide
        choice:
          - when: vars.input.open == true
            next: through
      - id: through
        end: { reply: { passed: true } }
  order:
    start: { channel: orders }
    nodes:
      - id: init
        set: { total: "= vars.input.amount * 2", label: "= 'order-' + vars.input.id" }
      - id: route
        choice:
          - when: vars.total > 100
            next: fork
        otherwise: pay
      - id: fork
        parallel:
          - - id: short
              wait: { duration: PT0.2S }
          - - id: note
              emit: { channel: ledger, data: { order: "= vars.input.id" }, key: vars.input.id }
      - id: pay
        receive: { channel: payments, key: vars.input.id, timeout: PT1H, on-timeout: expired }
        output: payment
      - id: done
        end: { reply: { order: "= vars.input.id", paid: "= vars.payment.amount" } }
      - id: expired
        fail: { code: ORDER.EXPIRED, detail: "= 'no payment for ' + vars.input.id" }
  quick:
    start: { channel: checkout }
    nodes:
      - id: answer
        end: { reply: { ok: true, id: "= vars.input.id" } }
  buffered:
    start: { channel: early-start }
    nodes:
      - id: wait-early
        receive: { channel: early, key: vars.input.id }
        output: early
      - id: finish
        end: {}
"#;

fn instance_id(body: &Value) -> String {
    body["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("no instance in {body}"))
        .to_owned()
}

fn kinds(history: &[Value]) -> Vec<&str> {
    history
        .iter()
        .map(|event| event["kind"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn every_node_kind_without_a_worker_runs_over_http() {
    let scratch = Scratch::new("node-kinds");
    let server = serve!(scratch.database()).deployed(FLOWS).await;

    let (status, body) = server
        .send("orders", "o-1", json!({"id": "o1", "amount": 80}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "suspended");
    assert_eq!(body["dedup"], false);
    let id = instance_id(&body);
    let instance = server.wait_for_status(&id, "suspended").await;
    assert_eq!(instance["vars"]["total"], 160);
    assert_eq!(instance["vars"]["label"], "order-o1");

    // The parallel's timer branch fires durably; the token then parks on the receive.
    let instance = server.wait_for_node(&id, "pay").await;
    assert_eq!(instance["tokens"][0]["park"]["kind"], "receive");

    let (status, body) = server
        .send("payments", "p-1", json!({"order": "o1", "amount": 160}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["status"], "completed");
    let history = server.history(&id).await;
    assert_audit_sequence_is_whole(&history);
    let seen = kinds(&history);
    for kind in [
        "started",
        "variables_set",
        "choice_taken",
        "forked",
        "emitted",
        "timer_fired",
        "joined",
        "message_received",
        "completed",
    ] {
        assert!(seen.contains(&kind), "history lacks {kind}: {seen:?}");
    }
}

#[tokio::test]
async fn ack_complete_answers_with_the_end_nodes_reply() {
    let scratch = Scratch::new("ack-complete");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (status, body) = server.send("checkout", "c-1", json!({"id": "c1"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"ok": true, "id": "c1"}));
}

#[tokio::test]
async fn a_fail_node_answers_a_held_caller_with_the_flows_own_code() {
    let scratch = Scratch::new("fail-node");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (status, body) = server.send("refusals", "r-1", json!({"id": "r1"})).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (500, Some("ORDER.REFUSED")),
        "{body}"
    );
    assert_eq!(body["detail"], "refused r1");
    let instance = server.instance(body["instance"].as_str().unwrap()).await;
    assert_eq!(
        (
            instance["status"].as_str(),
            instance["failure"]["node"].as_str()
        ),
        (Some("failed"), Some("no"))
    );
}

#[tokio::test]
async fn a_redelivered_message_is_answered_as_the_first_and_changes_nothing() {
    let scratch = Scratch::new("dedup");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (_, first) = server
        .send("orders", "o-dup", json!({"id": "d1", "amount": 10}))
        .await;
    let (status, again) = server
        .send("orders", "o-dup", json!({"id": "d1", "amount": 10}))
        .await;
    assert_eq!(status, 202);
    assert_eq!(again["instance"], first["instance"]);
    assert_eq!(again["dedup"], true);
    let (_, list) = server.get("/v1/instances").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_message_an_instance_waits_for_resumes_it_even_on_a_channel_that_starts_flows() {
    let scratch = Scratch::new("relay-on-start-channel");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (status, first) = server
        .send("handoffs", "h-1", json!({"id": "a", "next": "b"}))
        .await;
    assert_eq!(status, 202, "{first}");

    let (status, relayed) = server
        .send("handoffs", "h-2", json!({"id": "b", "next": "c"}))
        .await;

    assert_eq!(status, 202, "{relayed}");
    assert_eq!(
        (&relayed["instance"], &relayed["status"], &relayed["dedup"]),
        (&first["instance"], &json!("completed"), &json!(false)),
        "the waiting instance took the message; no second one started"
    );
    let (_, list) = server.get("/v1/instances").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    let (status, again) = server
        .send("handoffs", "h-2", json!({"id": "b", "next": "c"}))
        .await;
    assert_eq!(
        (status, &again["instance"], &again["dedup"]),
        (202, &first["instance"], &json!(true)),
        "{again}"
    );
}

#[tokio::test]
async fn intake_refusals_have_codes_and_change_nothing() {
    let scratch = Scratch::new("intake-errors");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let event = |data: Value| {
        json!({"specversion": "1.0", "id": "x", "type": "t", "source": "s", "data": data})
            .to_string()
    };
    let oversized = event(json!({"id": "big", "amount": 1, "pad": "x".repeat(2 << 20)}));
    let cases: Vec<(&str, String, u16, &str)> = vec![
        ("orders", "{not json".into(), 400, "SUTRA.INTAKE.DECODE"),
        (
            "orders",
            json!({"id": "x", "data": {}}).to_string(),
            400,
            "SUTRA.INTAKE.DECODE",
        ),
        (
            "orders",
            event(json!({"id": "v1"})),
            422,
            "SUTRA.INTAKE.VALIDATION",
        ),
        (
            "orders",
            event(json!({"id": "v2", "amount": "ten"})),
            422,
            "SUTRA.INTAKE.VALIDATION",
        ),
        (
            "orders",
            event(json!({"id": "nul\u{0}", "amount": 1})),
            422,
            "SUTRA.INTAKE.VALIDATION",
        ),
        (
            "nowhere",
            event(json!({})),
            404,
            "SUTRA.INTAKE.CHANNEL.UNKNOWN",
        ),
        ("orders", oversized, 413, "SUTRA.INTAKE.VALIDATION"),
        (
            "payments",
            event(json!({"order": "nobody"})),
            404,
            "SUTRA.RUNTIME.RELAY.NO_MATCH",
        ),
    ];
    for (channel, body, status, code) in cases {
        let (got, problem) = server
            .post_raw(&format!("/v1/channels/{channel}/messages"), body)
            .await;
        assert_eq!(
            (got, problem["code"].as_str()),
            (status, Some(code)),
            "{problem}"
        );
        assert!(
            problem["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{problem}"
        );
    }
    let (_, problem) = server
        .post_raw(
            "/v1/channels/orders/messages",
            event(json!({"id": "v3", "amount": "ten"})),
        )
        .await;
    assert_eq!(problem["violations"][0]["pointer"], "/amount", "{problem}");
    let (_, list) = server.get("/v1/instances").await;
    assert_eq!(
        list["items"],
        json!([]),
        "a refused message must not create anything"
    );
}

#[tokio::test]
async fn an_early_message_waits_in_the_buffer_for_its_receive() {
    let scratch = Scratch::new("buffer");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (status, body) = server
        .send("early", "e-1", json!({"id": "b1", "note": "early"}))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("buffered")),
        "{body}"
    );
    let (_, body) = server.send("early-start", "s-1", json!({"id": "b1"})).await;
    let id = instance_id(&body);
    let instance = server.wait_for_status(&id, "completed").await;
    assert_eq!(instance["vars"]["early"]["note"], "early");
}

#[tokio::test]
async fn a_failed_instance_is_durable_and_restore_runs_its_node_again() {
    let scratch = Scratch::new("restore");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (status, body) = server
        .send("gates", "g-1", json!({"id": "g1", "open": false}))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("failed")),
        "{body}"
    );
    let id = instance_id(&body);
    let instance = server.instance(&id).await;
    assert_eq!(
        instance["failure"]["code"], "SUTRA.RUNTIME.CHOICE.NO_MATCH",
        "{instance}"
    );
    assert_eq!(instance["failure"]["node"], "decide");

    let (status, body) = server.post(&format!("/v1/instances/{id}/restore")).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("failed")),
        "{body}"
    );
    let history = server.history(&id).await;
    assert_audit_sequence_is_whole(&history);
    let seen = kinds(&history);
    assert_eq!(
        seen.iter().filter(|k| **k == "failed").count(),
        2,
        "{seen:?}"
    );
    assert!(seen.contains(&"restored"), "{seen:?}");
}

#[tokio::test]
async fn cancel_resolves_every_wait_and_admin_calls_check_the_state() {
    let scratch = Scratch::new("cancel");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (_, body) = server
        .send("orders", "o-f", json!({"id": "f1", "amount": 10}))
        .await;
    let id = instance_id(&body);
    server.wait_for_node(&id, "pay").await;
    let (status, body) = server.post(&format!("/v1/instances/{id}/restore")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("SUTRA.ADMIN.STATE.INVALID")),
        "{body}"
    );
    let (status, body) = server.post(&format!("/v1/instances/{id}/cancel")).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (200, Some("cancelled")),
        "{body}"
    );
    let (status, body) = server
        .send("payments", "p-late", json!({"order": "f1", "amount": 1}))
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("SUTRA.RUNTIME.RELAY.NO_MATCH")),
        "{body}"
    );
    let (status, _) = server.post(&format!("/v1/instances/{id}/cancel")).await;
    assert_eq!(status, 409);
    let (status, body) = server.post("/v1/instances/no-such-id/cancel").await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("SUTRA.INSTANCE.NOT_FOUND")),
        "{body}"
    );
}

#[tokio::test]
async fn a_new_version_leaves_running_instances_on_theirs() {
    let scratch = Scratch::new("versions");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let (_, body) = server
        .send("orders", "o-v", json!({"id": "v1", "amount": 10}))
        .await;
    let old = instance_id(&body);
    let (status, body) = server
        .deploy(&FLOWS.replace("paid: \"= vars.payment.amount\"", "paid: v2"))
        .await;
    assert_eq!((status, body["version"].as_u64()), (201, Some(2)), "{body}");
    let (_, body) = server
        .send("payments", "p-v", json!({"order": "v1", "amount": 7}))
        .await;
    assert_eq!(body["status"], "completed");
    let instance = server.instance(&old).await;
    assert_eq!(instance["version"], 1);
    let (_, body) = server.get("/v1/deployments").await;
    let statuses: Vec<_> = body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["status"].clone())
        .collect();
    assert_eq!(statuses, vec![json!("draining"), json!("active")]);
}

/// Version 1 starts on `orders` and waits on `replies`; version 2 starts on `requests` and
/// declares neither.
const TAIL_V1: &str = r#"
name: tail
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: wait
        receive: { channel: replies, key: vars.input.id }
"#;
const TAIL_V2: &str = r#"
name: tail
channels:
  requests: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: requests }
    nodes:
      - id: done
        end: {}
"#;

#[tokio::test]
async fn a_draining_version_keeps_the_channels_its_pinned_instances_wait_on_and_starts_nothing() {
    let scratch = Scratch::new("draining-tail");
    let server = serve!(scratch.database()).deployed(TAIL_V1).await;
    let (_, body) = server.send("orders", "o-1", json!({"id": "t1"})).await;
    let pinned = instance_id(&body);
    server.deploy_accepted(TAIL_V2).await;

    let (status, body) = server.send("orders", "o-2", json!({"id": "t2"})).await;
    assert_eq!(status, 404, "a dropped channel starts nothing: {body}");
    assert_eq!(body["code"], "SUTRA.RUNTIME.RELAY.NO_MATCH", "{body}");
    let (status, body) = server.send("replies", "r-1", json!({"id": "t1"})).await;
    assert_eq!(
        status, 202,
        "the pinned instance's reply still correlates: {body}"
    );
    let ended = server.wait_for_status(&pinned, "completed").await;
    assert_eq!(ended["version"], 1);
}

#[tokio::test]
async fn an_invalid_deployment_is_refused_with_located_diagnostics() {
    let scratch = Scratch::new("deploy-invalid");
    let server = Server::start(&serve!(scratch.database()));
    let (status, body) = server
        .deploy("name: shop\nflows:\n  f:\n    start: { channel: nope }\n    nodes: []\n")
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("SUTRA.DEPLOY.INVALID")),
        "{body}"
    );
    let first = &body["diagnostics"][0];
    assert!(
        first["line"].as_u64().is_some() && first["message"].as_str().is_some(),
        "{body}"
    );
}

#[tokio::test]
async fn an_attribute_too_long_to_index_or_holding_nul_or_a_correlation_key_too_long_is_refused_at_intake()
 {
    let scratch = Scratch::new("key-limits");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    let long = "x".repeat(2_000);
    let event = |attribute: &str, value: &str| {
        let mut event = json!({"specversion": "1.0", "id": "evt-1", "type": "t", "source": "s", "data": {"id": "o1", "amount": 1}});
        event[attribute] = json!(value);
        event.to_string()
    };
    let refused = |(status, body): (u16, Value), says: &str| {
        assert_eq!(
            (status, body["code"].clone()),
            (422, json!("SUTRA.INTAKE.VALIDATION")),
            "{body}"
        );
        assert!(body.to_string().contains(says), "{says}: {body}");
    };
    let messages = "/v1/channels/orders/messages";
    refused(
        server.post_raw(messages, event("id", &long)).await,
        "`id` is 2000 bytes long; at most 1024",
    );
    for (attribute, value) in [("id", "a\u{0}b"), ("source", "s\u{0}"), ("time", "\u{0}")] {
        refused(
            server.post_raw(messages, event(attribute, value)).await,
            &format!("`{attribute}` contains the character"),
        );
    }
    refused(
        server
            .send("orders", "evt-long-key", json!({"id": long, "amount": 1}))
            .await,
        "correlation key",
    );
    let (_, listed) = server.get("/v1/instances").await;
    assert_eq!(listed["items"], json!([]), "nothing was started");
}

#[tokio::test]
async fn a_query_or_path_that_does_not_fit_is_a_problem_with_a_code_and_a_cursor_must_be_ours() {
    let scratch = Scratch::new("extractors");
    let server = serve!(scratch.database()).deployed(FLOWS).await;
    for path in [
        "/v1/instances?limit=-1",
        "/v1/instances?after=%25%25%25garbage",
        "/v1/tasks?after=not-a-task",
        "/v1/deployments/shop/abc",
        // PostgreSQL text cannot hold \u0000: refused before any route reads it.
        "/v1/instances?flow=a%00b",
        "/v1/tasks?topic=%00",
        "/v1/instances/a%00b",
    ] {
        let (status, body) = server.get(path).await;
        assert_eq!(
            (status, body["code"].clone()),
            (400, json!("SUTRA.API.REQUEST.INVALID")),
            "{path}: {body}"
        );
        assert!(
            body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{path}: {body}"
        );
    }
}
