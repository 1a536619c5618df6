//! End to end: messages coming in by the brokers (SPEC §5.1–§5.3), against a real `sutra serve`
//! and the real RabbitMQ and NATS JetStream on this machine. Each test declares its own uniquely
//! named queues and streams and removes them; what a queue holds unacknowledged is read from
//! RabbitMQ itself.

use serde_json::{Value, json};
use sutra_testkit::brokers::{TestQueue, TestStream, TestVhost};
use sutra_testkit::{Scratch, Server, ServerOptions, event, serve, until};

fn with_brokers(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database()).amqp().nats()
}

async fn instances(server: &Server) -> Vec<Value> {
    let (status, list) = server.get("/v1/instances?limit=100").await;
    assert_eq!(status, 200, "{list}");
    list["items"].as_array().unwrap().clone()
}

/// The one instance there is, once there is one.
async fn only_instance(server: &Server) -> String {
    let mut only = None;
    until("an instance starts", async || {
        let listed = instances(server).await;
        assert!(listed.len() <= 1, "more than one instance: {listed:?}");
        only = listed
            .first()
            .map(|instance| instance["id"].as_str().unwrap().to_owned());
        only.is_some()
    })
    .await;
    only.unwrap()
}

/// A trade starts from an AMQP queue, waits for its confirmation on a NATS stream, and emits to
/// both brokers.
fn trade(orders: &str, confirmations: &TestStream, bus: &str, ledger: &TestStream) -> String {
    format!(
        r#"
name: trade
channels:
  orders: {{ transport: amqp, queue: {orders}, correlate: data.id }}
  confirmations: {{ transport: nats, stream: {}, subject: {}, correlate: data.order }}
  bus: {{ transport: amqp, queue: {bus} }}
  ledger: {{ transport: nats, subject: {} }}
flows:
  trade:
    start: {{ channel: orders }}
    nodes:
      - id: confirmed
        receive: {{ channel: confirmations, key: vars.input.id }}
        output: confirmation
      - id: to-bus
        emit: {{ channel: bus, data: {{ order: "= vars.input.id" }} }}
      - id: to-ledger
        emit: {{ channel: ledger, data: {{ order: "= vars.input.id", by: "= vars.confirmation.by" }} }}
      - id: done
        end: {{}}
"#,
        confirmations.name, confirmations.subject, ledger.subject
    )
}

#[tokio::test]
async fn an_instance_started_from_amqp_resumes_from_nats_and_emits_to_both() {
    let orders = TestQueue::declare_with_dead_letters("sutra-test-orders").await;
    let bus = TestQueue::declare("sutra-test-bus").await;
    let confirmations = TestStream::create("sutra-test-confirmations").await;
    let ledger = TestStream::create("sutra-test-ledger").await;
    let scratch = Scratch::new("broker-intake");
    let server = with_brokers(&scratch)
        .deployed(&trade(&orders.name, &confirmations, &bus.name, &ledger))
        .await;

    orders
        .publish_event(&event("order-1", json!({"id": "o1"})))
        .await;
    let instance = only_instance(&server).await;
    server.wait_for_node(&instance, "confirmed").await;
    confirmations
        .publish_binary("confirmation-1", &json!({"order": "o1", "by": "desk"}))
        .await;
    server.wait_for_status(&instance, "completed").await;

    let sent = bus.next().await;
    let published = ledger.message(1).await;
    let history = server.history(&instance).await;
    let key = |node: &str| {
        let emitted = history
            .iter()
            .find(|e| e["kind"] == "emitted" && e["node"] == node)
            .unwrap_or_else(|| panic!("no emitted event of {node}"));
        format!("{instance}:{}:{node}", emitted["seq"])
    };
    assert_eq!(
        sent.properties.message_id().as_ref().map(|id| id.as_str()),
        Some(key("to-bus").as_str())
    );
    assert_eq!(
        published.headers.get("Nats-Msg-Id").map(|v| v.as_str()),
        Some(key("to-ledger").as_str())
    );
    let ledgered: Value = serde_json::from_slice(&published.payload).unwrap();
    assert_eq!(ledgered["data"], json!({"order": "o1", "by": "desk"}));

    // Redelivered — here published again with the same id — the message is a dedup hit.
    orders
        .publish_event(&event("order-1", json!({"id": "o1"})))
        .await;
    // Not a CloudEvent: dead-lettered (AMQP), terminated with an advisory (NATS), and nothing
    // changes.
    orders.publish(b"{not json", Default::default()).await;
    let dead = orders.next_dead_letter().await;
    assert_eq!(dead.data, b"{not json");
    let mut terminations = confirmations
        .terminations("sutra-trade-confirmations")
        .await;
    confirmations
        .publish(async_nats::HeaderMap::new(), b"{not json".to_vec())
        .await;
    let advisory = TestStream::next_termination(&mut terminations).await;
    assert_eq!(advisory["stream_seq"], 2, "{advisory}");
    orders
        .wait_for_counts("settle every message", |c| {
            c.ready == 0 && c.unacknowledged == 0
        })
        .await;
    assert_eq!(
        instances(&server).await.len(),
        1,
        "the redelivery is a dedup hit"
    );
    assert_eq!(
        confirmations
            .consumer_state("sutra-trade-confirmations")
            .await
            .map(|(_, _, pending)| pending),
        Some(0),
        "the confirmation was acknowledged"
    );

    orders.delete().await;
    bus.delete().await;
    confirmations.delete().await;
    ledger.delete().await;
}

/// An approval requested over AMQP, answered over HTTP.
fn approval(requests: &str) -> String {
    format!(
        r#"
name: approval
channels:
  requests: {{ transport: amqp, queue: {requests}, correlate: data.id, ack: complete, ack-timeout: PT60S }}
  decisions: {{ transport: http, correlate: data.id }}
flows:
  approval:
    start: {{ channel: requests }}
    nodes:
      - id: decide
        receive: {{ channel: decisions, key: vars.input.id }}
      - id: done
        end: {{ reply: {{ approved: true }} }}
"#
    )
}

#[tokio::test]
async fn ack_complete_over_amqp_acknowledges_only_once_the_instance_ended() {
    let requests = TestQueue::declare("sutra-test-requests").await;
    let scratch = Scratch::new("broker-ack-complete");
    let server = with_brokers(&scratch)
        .deployed(&approval(&requests.name))
        .await;

    requests
        .publish_event(&event("request-1", json!({"id": "r1"})))
        .await;
    let instance = only_instance(&server).await;
    server.wait_for_node(&instance, "decide").await;
    let held = requests.counts();
    assert_eq!(
        (held.ready, held.unacknowledged),
        (0, 1),
        "the message is held unacknowledged while its instance runs"
    );

    let (status, body) = server
        .send("decisions", "decision-1", json!({"id": "r1"}))
        .await;
    assert_eq!(status, 202, "{body}");
    server.wait_for_status(&instance, "completed").await;
    requests
        .wait_for_counts("acknowledge the request", |c| {
            c.ready == 0 && c.unacknowledged == 0
        })
        .await;

    requests.delete().await;
}

/// A flow that starts on an AMQP queue.
fn started_by(queue: &str) -> String {
    started_on(&format!("{{ transport: amqp, queue: {queue} }}"))
}

/// A flow that starts on channel `jobs`, declared by `jobs`.
fn started_on(jobs: &str) -> String {
    format!(
        r#"
name: intake
channels:
  jobs: {jobs}
flows:
  job:
    start: {{ channel: jobs }}
    nodes:
      - id: done
        end: {{}}
"#
    )
}

#[tokio::test]
async fn readiness_names_a_channel_whose_broker_cannot_be_reached_and_never_its_password() {
    let scratch = Scratch::new("broker-unreachable");
    let options = serve!(scratch.database()).env(
        "SUTRA_TRANSPORTS_AMQP_URL",
        "amqp://guest:s3cret@127.0.0.1:1/%2f",
    );
    let server = Server::start(&options);
    let (status, body) = server.get("/readyz").await;
    assert_eq!(status, 200, "nothing to consume yet: {body}");
    server
        .deploy_accepted(&started_by("sutra-test-nowhere"))
        .await;

    let body = unready(&server).await;
    assert_eq!(body["code"], "SUTRA.RUNTIME.ENGINE.UNAVAILABLE");
    let detail = body["detail"].as_str().unwrap();
    assert!(detail.contains("channel `jobs`"), "{detail}");
    assert!(detail.contains("amqp://guest:***@127.0.0.1:1"), "{detail}");
    assert!(!body.to_string().contains("s3cret"), "{body}");
    assert!(!server.stderr_text().contains("s3cret"));
}

/// `/readyz`'s answer once it says the replica is not ready.
async fn unready(server: &Server) -> Value {
    let mut answer = (0, Value::Null);
    until("readiness says the broker is unreachable", async || {
        answer = server.get("/readyz").await;
        answer.0 == 503
    })
    .await;
    let (status, body) = answer;
    assert_eq!(status, 503, "{body}");
    body
}

#[tokio::test]
async fn readiness_names_the_missing_consumer_a_channel_leaves_to_the_operator() {
    let scratch = Scratch::new("broker-theirs");
    let server = Server::start(&with_brokers(&scratch));
    let stream = TestStream::create("sutra-test-theirs").await;
    let document = started_on(&format!(
        "{{ transport: nats, subject: {}, stream: {}, create-consumer: false }}",
        stream.subject, stream.name
    ));
    let (status, body) = server.deploy(&document).await;
    assert_eq!(status, 201, "{body}");

    let body = unready(&server).await;
    let name = stream.name.clone();
    stream.delete().await;

    assert_eq!(body["code"], "SUTRA.RUNTIME.ENGINE.UNAVAILABLE");
    let detail = body["detail"].as_str().unwrap();
    for named in [
        "channel `jobs`",
        &format!("stream `{name}`"),
        "`sutra-intake-jobs`",
        "create-consumer: false",
    ] {
        assert!(detail.contains(named), "{named} in {detail}");
    }
}

#[tokio::test]
async fn a_deployment_declaring_a_broker_channel_is_refused_on_a_replica_without_its_broker() {
    let scratch = Scratch::new("broker-unconfigured");
    let server = Server::start(&serve!(scratch.database()));
    let (status, body) = server.deploy(&started_by("sutra-test-nowhere")).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["code"], "SUTRA.DEPLOY.INVALID");
    let diagnostics = body["diagnostics"].to_string();
    assert!(diagnostics.contains("broker-not-configured"), "{body}");
    assert!(
        diagnostics.contains("set sutra.transports.amqp.url"),
        "{body}"
    );
    assert!(instances(&server).await.is_empty());
}

/// SIGKILL between the step's commit and the broker's ack: the broker hands the message back,
/// and its redelivery to the next replica is a dedup hit — applied once.
#[tokio::test]
async fn a_message_consumed_before_a_crash_is_a_dedup_hit_when_redelivered() {
    let jobs = TestQueue::declare("sutra-test-jobs").await;
    let scratch = Scratch::new("broker-crash-before-ack");
    let mut doomed = with_brokers(&scratch)
        .fault("before-broker-ack")
        .deployed(&started_by(&jobs.name))
        .await;
    jobs.publish_event(&event("job-1", json!({}))).await;
    assert!(doomed.wait_for_death(), "killed at before-broker-ack");
    drop(doomed);
    let back = jobs
        .wait_for_counts("take the unacknowledged message back", |c| c.consumers == 0)
        .await;
    assert_eq!(
        back.ready, 1,
        "the broker holds the message again: {back:?}"
    );

    let server = Server::start(&with_brokers(&scratch));
    jobs.wait_for_counts("settle the redelivery", |c| {
        c.ready == 0 && c.unacknowledged == 0
    })
    .await;
    let listed = instances(&server).await;
    assert_eq!(
        listed.len(),
        1,
        "the redelivery started nothing: {listed:?}"
    );
    let instance = listed[0]["id"].as_str().unwrap();
    let history = server.history(instance).await;
    sutra_testkit::assert_audit_sequence_is_whole(&history);
    assert_eq!(
        sutra_testkit::count_kind(&history, "started"),
        1,
        "{history:?}"
    );

    jobs.delete().await;
}

/// The broker drops every connection, as a restart does: the consumer connects again by itself,
/// and a message published meanwhile is consumed once it is back.
#[tokio::test]
async fn a_consumer_whose_broker_dropped_its_connection_connects_again_and_loses_nothing() {
    let vhost = TestVhost::create("sutra-test-drop");
    let jobs = TestQueue::declare_in(&vhost, "jobs").await;
    let scratch = Scratch::new("broker-dropped");
    let server = serve!(scratch.database())
        .env("SUTRA_TRANSPORTS_AMQP_URL", &vhost.url)
        .deployed(&started_by(&jobs.name))
        .await;
    jobs.publish_event(&event("job-1", json!({}))).await;
    jobs.wait_for_counts("be consumed", |c| c.consumers == 1 && c.ready == 0)
        .await;

    vhost.close_connections();
    let jobs = TestQueue::declare_in(&vhost, &jobs.name).await;
    jobs.publish_event(&event("job-2", json!({}))).await;
    jobs.wait_for_counts("be consumed again", |c| {
        c.consumers == 1 && c.ready == 0 && c.unacknowledged == 0
    })
    .await;
    until("both jobs run", async || {
        let listed = instances(&server).await;
        listed.iter().filter(|i| i["status"] == "completed").count() == 2
    })
    .await;
    let (status, body) = server.get("/readyz").await;
    assert_eq!(status, 200, "consuming again: {body}");

    drop(jobs);
    vhost.delete();
}
