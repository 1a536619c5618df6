//! End-to-end: the outbox (SPEC §5.4) over HTTP webhooks, against a real `sutra serve` and a
//! receiver in the test process that records what it gets and answers per a scripted plan.
//!
//! An `emit` arrives as a CloudEvent whose `id` and `Idempotency-Key` are
//! `{instance}:{audit seq}:{node}`; a failing receiver gets the same key on every retry; past
//! `max-attempts` the row is poisoned and stays visible at `GET /v1/instances/{id}/outbox`; and a
//! sender killed between a send and its mark sends the same message again after a restart, and
//! nothing else.

use std::time::Duration;

use serde_json::{Value, json};
use sutra_testkit::{Received, Receiver, Scratch, Server, ServerOptions, serve};

/// Retries come quickly, so that a test of several attempts takes a second, not minutes.
const BACKOFF: &str = "PT0.1S";
/// An AMQP broker nobody runs: connecting to it is refused.
const NO_BROKER: &str = "amqp://guest:guest@127.0.0.1:1/%2f";

/// `ledger` sends to `ledger_url`, with `ledger_limit` as its `max-attempts` if any; `elsewhere`
/// sends to a port nobody listens on; `bus` is an amqp channel whose broker is not there.
fn deployment(ledger_url: &str, ledger_limit: Option<u32>, closed_url: &str) -> String {
    let limit = ledger_limit.map_or(String::new(), |n| format!("max-attempts: {n}"));
    format!(
        r#"
name: shop
channels:
  orders: {{ transport: http, correlate: data.id }}
  misdirected: {{ transport: http, correlate: data.id }}
  brokered: {{ transport: http, correlate: data.id }}
  ledger: {{ transport: http, url: "{ledger_url}", {limit} }}
  elsewhere: {{ transport: http, url: "{closed_url}", max-attempts: 2 }}
  bus: {{ transport: amqp, queue: shop.events, max-attempts: 1 }}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: notify
        emit: {{ channel: ledger, data: {{ order: "= vars.input.id", amount: "= vars.input.amount" }}, key: vars.input.id }}
      - id: done
        end: {{}}
  stray:
    start: {{ channel: misdirected }}
    nodes:
      - id: notify
        emit: {{ channel: elsewhere, data: {{ order: "= vars.input.id" }} }}
  brokered:
    start: {{ channel: brokered }}
    nodes:
      - id: publish
        emit: {{ channel: bus, data: {{ order: "= vars.input.id" }} }}
"#
    )
}

/// A loopback url whose port was free a moment ago: connecting to it is refused.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    format!("http://{}/gone", listener.local_addr().unwrap())
}

fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database())
        .env("SUTRA_OUTBOX_BACKOFF", BACKOFF)
        .env("SUTRA_TRANSPORTS_AMQP_URL", NO_BROKER)
}

async fn deploy(server: &Server, receiver: &Receiver, ledger_limit: Option<u32>) {
    let yaml = deployment(&receiver.url("/ledger"), ledger_limit, &closed_url());
    server.deploy_accepted(&yaml).await;
}

async fn start(server: &Server, channel: &str, id: &str) -> String {
    let data = json!({"id": id, "amount": 42});
    let (status, body) = server.send(channel, &format!("evt-{id}"), data).await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// `{instance}:{audit seq}:{node}` of the instance's one `emitted` event.
async fn emitted_key(server: &Server, instance: &str) -> String {
    let history = server.history(instance).await;
    let emitted: Vec<&Value> = history.iter().filter(|e| e["kind"] == "emitted").collect();
    let [event] = emitted.as_slice() else {
        panic!("one emitted event: {history:?}");
    };
    format!(
        "{instance}:{}:{}",
        event["seq"],
        event["node"].as_str().unwrap()
    )
}

fn keys(received: &[Received]) -> Vec<Option<&str>> {
    received
        .iter()
        .map(|request| request.idempotency_key.as_deref())
        .collect()
}

/// Every request carried the same key, as header and as the event's `id`, and the same body.
fn assert_one_message_sent_again(received: &[Received], key: &str) {
    assert!(
        keys(received).iter().all(|k| *k == Some(key)),
        "{received:?}"
    );
    assert!(received.iter().all(|r| r.body["id"] == key), "{received:?}");
    assert!(
        received.windows(2).all(|pair| pair[0].body == pair[1].body),
        "{received:?}"
    );
}

#[tokio::test]
async fn an_emit_arrives_as_a_cloudevent_keyed_by_instance_sequence_and_node() {
    let scratch = Scratch::new("outbox-delivered");
    let receiver = Receiver::accepting();
    let server = Server::start(&options(&scratch));
    deploy(&server, &receiver, None).await;

    let instance = start(&server, "orders", "o1").await;

    let [request] = <[Received; 1]>::try_from(receiver.wait_for(1).await).unwrap();
    let key = emitted_key(&server, &instance).await;
    assert_eq!(request.path, "/ledger");
    assert_eq!(
        request.content_type.as_deref(),
        Some("application/cloudevents+json")
    );
    assert_eq!(request.idempotency_key.as_deref(), Some(key.as_str()));
    assert_eq!(
        request.body,
        json!({
            "specversion": "1.0",
            "id": key,
            "type": "sutra.shop.ledger",
            "source": "sutra://default/shop/1",
            "subject": instance,
            "datacontenttype": "application/json",
            "partitionkey": "o1",
            "data": {"order": "o1", "amount": 42},
        })
    );
    let [row] = <[Value; 1]>::try_from(server.wait_for_outbox(&instance, "sent").await).unwrap();
    assert_eq!(
        (row["idempotency_key"].as_str(), row["attempts"].as_u64()),
        (Some(key.as_str()), Some(1))
    );
}

#[tokio::test]
async fn a_failing_receiver_gets_the_same_key_on_every_retry_until_it_accepts() {
    let scratch = Scratch::new("outbox-retried");
    let receiver = Receiver::start(&[500, 500, 500], 200);
    let server = Server::start(&options(&scratch));
    deploy(&server, &receiver, None).await;

    let instance = start(&server, "orders", "o2").await;

    let [row] = <[Value; 1]>::try_from(server.wait_for_outbox(&instance, "sent").await).unwrap();
    let received = receiver.received();
    assert_eq!(received.len(), 4, "three refusals, then the acceptance");
    assert_one_message_sent_again(&received, &emitted_key(&server, &instance).await);
    assert_eq!(row["attempts"], 4);
    assert_eq!(row["last_error"], Value::Null, "{row}");
}

#[tokio::test]
async fn past_max_attempts_the_row_is_poisoned_and_stays_visible() {
    let scratch = Scratch::new("outbox-poisoned");
    let receiver = Receiver::start(&[], 500);
    let server = Server::start(&options(&scratch));
    deploy(&server, &receiver, Some(3)).await;

    let instance = start(&server, "orders", "o3").await;

    let [row] =
        <[Value; 1]>::try_from(server.wait_for_outbox(&instance, "poisoned").await).unwrap();
    let received = receiver.received();
    assert_eq!(received.len(), 3, "max-attempts sends, then no more");
    assert_one_message_sent_again(&received, &emitted_key(&server, &instance).await);
    assert_eq!(row["attempts"], 3);
    let reason = row["last_error"].as_str().unwrap_or_default();
    assert!(reason.contains("HTTP 500"), "{row}");
    assert_eq!(row["data"], json!({"order": "o3", "amount": 42}));
    assert_eq!(
        server.instance(&instance).await["status"],
        "completed",
        "a poisoned send does not fail the instance that emitted it"
    );
}

#[tokio::test]
async fn unreachable_transports_fail_with_a_reason() {
    let scratch = Scratch::new("outbox-unreachable");
    let receiver = Receiver::accepting();
    let server = Server::start(&options(&scratch));
    deploy(&server, &receiver, None).await;

    let refused = start(&server, "misdirected", "m1").await;
    let brokered = start(&server, "brokered", "b1").await;

    let [row] = <[Value; 1]>::try_from(server.wait_for_outbox(&refused, "poisoned").await).unwrap();
    let reason = row["last_error"].as_str().unwrap_or_default();
    assert!(reason.contains("cannot connect"), "{row}");
    assert_eq!(row["attempts"], 2);
    let [row] =
        <[Value; 1]>::try_from(server.wait_for_outbox(&brokered, "poisoned").await).unwrap();
    let reason = row["last_error"].as_str().unwrap_or_default();
    assert!(
        reason.starts_with("cannot connect to the AMQP broker at amqp://guest:***@127.0.0.1:1"),
        "{row}"
    );
    assert!(receiver.received().is_empty());
}

#[tokio::test]
async fn a_sender_killed_between_send_and_mark_sends_the_same_message_again_and_nothing_else() {
    // The first send reaches the receiver, then the process dies before marking the row sent.
    // The row stays claimed; after a restart its claim goes stale (the claim timeout, shortened
    // here) and the new process sends it again: same key, same payload, and then marks it sent.
    let scratch = Scratch::new("outbox-after-send");
    let receiver = Receiver::accepting();
    let options = options(&scratch).claim_timeout(Duration::from_secs(1));
    let mut server = Server::start(&options.clone().fault("after-send"));
    deploy(&server, &receiver, None).await;

    // The reply races the send that kills the process: it may or may not arrive.
    let data = json!({"id": "k1", "amount": 42});
    let event = json!({"specversion": "1.0", "id": "evt-k1", "type": "test", "source": "test", "data": data});
    let _ = server
        .try_post_raw("/v1/channels/orders/messages", event.to_string())
        .await;
    assert!(server.wait_for_death(), "the send was never made");
    assert_eq!(receiver.received().len(), 1);

    let server = Server::start(&options);
    let (_, list) = server.get("/v1/instances").await;
    let instance = list["items"][0]["id"].as_str().unwrap().to_owned();
    server.wait_for_outbox(&instance, "sent").await;

    let received = receiver.received();
    assert_eq!(received.len(), 2, "sent again once, and nothing else");
    assert_one_message_sent_again(&received, &emitted_key(&server, &instance).await);
}

/// An `emit` to an `https://` webhook whose certificate a private CA signed.
fn over_tls(url: &str) -> String {
    format!(
        r#"
name: secure
channels:
  orders: {{ transport: http, correlate: data.id }}
  ledger: {{ transport: http, url: "{url}", max-attempts: 1 }}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: notify
        emit: {{ channel: ledger, data: {{ order: "= vars.input.id" }} }}
"#
    )
}

#[tokio::test]
async fn an_https_webhook_is_sent_when_its_certificate_is_trusted_and_refused_when_not() {
    let receiver = Receiver::accepting_over_tls();
    let scratch = Scratch::new("outbox-tls");
    let ca = scratch.path().join("ca.pem");
    std::fs::write(&ca, receiver.certificate_pem()).unwrap();
    let url = receiver.url("/ledger");
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    // Trusted: the platform's roots and the configured bundle.
    let trusting = options(&scratch)
        .env("SUTRA_TRANSPORTS_HTTP_CA_FILE", ca.to_str().unwrap())
        .deployed(&over_tls(&url))
        .await;
    let sent = start(&trusting, "orders", "s1").await;
    trusting.wait_for_outbox(&sent, "sent").await;
    let received = receiver.wait_for(1).await;
    assert_eq!(received[0].path, "/ledger");
    assert!(received[0].idempotency_key.is_some());
    drop(trusting);

    // Not trusted: the platform's roots alone do not vouch for it.
    let strict = Scratch::new("outbox-tls-untrusted");
    let untrusting = options(&strict).deployed(&over_tls(&url)).await;
    let refused = start(&untrusting, "orders", "s2").await;
    let [row] =
        <[Value; 1]>::try_from(untrusting.wait_for_outbox(&refused, "poisoned").await).unwrap();
    let reason = row["last_error"].as_str().unwrap_or_default();
    assert!(reason.contains("certificate"), "{row}");
    assert_eq!(receiver.received().len(), 1, "nothing more reached it");
}
