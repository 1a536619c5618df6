//! The identity bar of execution lanes (seed 001): with one lane, a recorded deterministic
//! workload produces exactly the histories it produced when the golden file was recorded.
//!
//! A suite of feature tests asserts what someone thought to assert; a recorded history fails on
//! any change of behaviour at all — an extra event, a reordered one, a different detail. Times
//! and instance ids are normalized; everything else must match. `UPDATE_GOLDEN=1` re-records it
//! (only when a change of behaviour is intended, and the diff then says what changed).

use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, serve};

const EXAMPLE: &str = include_str!("../../../examples/brokers/approval.yaml");
/// The example's decisions arrive from an AMQP queue; this test sends them over HTTP, the one
/// transport it drives, so it declares that channel an http one (intake refuses a message that
/// arrives by another transport than its channel's).
const AMQP_APPROVALS: &str = "transport: amqp\n    queue: expense.approvals";
const GOLDEN: &str = "tests/golden/identity-lanes-1.json";

#[tokio::test]
async fn one_lane_replays_the_recorded_workload_identically() {
    let scratch = Scratch::new("identity");
    let server = Server::start(&serve!(scratch.database()).lanes(1));
    assert!(
        EXAMPLE.contains(AMQP_APPROVALS),
        "the example changed its approvals channel"
    );
    server
        .deploy_accepted(&EXAMPLE.replace(AMQP_APPROVALS, "transport: http"))
        .await;

    let paid = claim(&server, "c1", 50).await;
    complete(
        &server,
        "check-expense-policy",
        json!({"autoApprove": true, "manager": "m"}),
    )
    .await;
    server.wait_for_node(&paid, "pay").await;
    complete(&server, "pay-expense", json!({"paid": true})).await;
    server.wait_for_status(&paid, "completed").await;

    let rejected = claim(&server, "c2", 500).await;
    complete(
        &server,
        "check-expense-policy",
        json!({"autoApprove": false, "manager": "m"}),
    )
    .await;
    server.wait_for_node(&rejected, "await-decision").await;
    let (status, body) = server
        .send(
            "approvals",
            "d-2",
            json!({"claimId": "c2", "approved": false, "by": "boss"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    server.wait_for_status(&rejected, "failed").await;
    let (status, body) = server
        .post(&format!("/v1/instances/{rejected}/restore"))
        .await;
    assert_eq!(status, 200, "{body}");

    let refused = claim(&server, "c3", 70).await;
    let task = poll(&server, "check-expense-policy").await;
    let error = json!({"lock_token": task["lock_token"], "error": {"code": "POLICY.LIMIT", "message": "over the limit"}, "retry": false});
    let (status, body) = server
        .post_json(
            &format!("/v1/tasks/{}/fail", task["id"].as_str().unwrap()),
            &error,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    server.wait_for_status(&refused, "failed").await;
    let (status, body) = server
        .post(&format!("/v1/instances/{refused}/cancel"))
        .await;
    assert_eq!(status, 200, "{body}");

    let mut recorded = Vec::new();
    for (name, id) in [
        ("paid", &paid),
        ("rejected", &rejected),
        ("refused", &refused),
    ] {
        let history = server.history(id).await;
        recorded.push(json!({"instance": name, "history": normalized(history, id)}));
    }
    compare_with_golden(&Value::Array(recorded));
}

async fn claim(server: &Server, id: &str, amount: u64) -> String {
    let data = json!({"claimId": id, "employee": "e", "amount": amount});
    let (status, body) = server
        .send("expense-claims", &format!("claim-{id}"), data)
        .await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

async fn poll(server: &Server, topic: &str) -> Value {
    let request = json!({"worker": "identity", "topics": [topic], "max": 1, "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &request).await;
    assert_eq!(status, 200, "{tasks}");
    tasks[0].clone()
}

async fn complete(server: &Server, topic: &str, output: Value) {
    let task = poll(server, topic).await;
    let body = json!({"lock_token": task["lock_token"], "output": output});
    let (status, answer) = server
        .post_json(
            &format!("/v1/tasks/{}/complete", task["id"].as_str().unwrap()),
            &body,
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

/// Drops what differs between runs by nature: times, and the instance's own id.
fn normalized(history: Vec<Value>, instance: &str) -> Vec<Value> {
    history
        .into_iter()
        .map(|event| without_times(event, instance))
        .collect()
}

fn without_times(value: Value, instance: &str) -> Value {
    match value {
        Value::String(text) if text.parse::<jiff::Timestamp>().is_ok() => {
            Value::String("<time>".into())
        }
        Value::String(text) => Value::String(text.replace(instance, "<instance>")),
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| without_times(v, instance))
                .collect(),
        ),
        Value::Object(map) => map
            .into_iter()
            .map(|(k, v)| (k, without_times(v, instance)))
            .collect(),
        other => other,
    }
}

fn compare_with_golden(recorded: &Value) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN);
    let rendered = serde_json::to_string_pretty(recorded).unwrap() + "\n";
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let golden = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; record it with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(
        rendered, golden,
        "the histories changed; if intended, re-record with UPDATE_GOLDEN=1"
    );
}
