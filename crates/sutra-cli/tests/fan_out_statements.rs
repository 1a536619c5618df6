//! A fan-out costs no round trip per item (issue 33, decision 0051), shown on PostgreSQL by the
//! statements the server runs, as sqlx logs each one (`SUTRA_LOG=sqlx::query=debug`): the step
//! that starts a loop of 1,000 bodies writes their tasks in as many statements as one of 10, and
//! the step that withdraws 999 bodies cancels their tasks in one statement.

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Server, serve};

const FAN_OUT: &str = r#"
name: fan-out
channels:
  batches: { transport: http, correlate: data.id }
flows:
  batch:
    start: { channel: batches }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          task: { topic: item, input: "= item" }
        output: results
        on-error: stopped
      - id: done
        end: {}
      - id: stopped
        end: {}
"#;

/// The text of the statement that cancels a step's withdrawn tasks (`cancel_tasks`).
const WITHDRAWAL: &str = "park = ANY($2) AND state IN";

/// The statements run so far whose text holds `needle`.
fn statements(server: &Server, needle: &str) -> usize {
    server
        .stderr_text()
        .lines()
        .filter(|line| line.contains("sqlx::query") && line.contains(needle))
        .count()
}

/// Starts a loop over `items` items; returns how many statements inserted tasks meanwhile.
async fn fan_out(server: &Server, id: &str, items: u64) -> usize {
    let before = statements(server, "INSERT INTO tasks");
    let list: Vec<Value> = (0..items).map(|n| json!(n)).collect();
    let (status, body) = server
        .send("batches", id, json!({"id": id, "items": list}))
        .await;
    assert_eq!(
        (status, &body["status"]),
        (202, &json!("suspended")),
        "{body}"
    );
    statements(server, "INSERT INTO tasks") - before
}

#[tokio::test]
async fn fan_out_is_a_constant_number_of_statements() {
    let database = TestDatabase::create().await;
    let server = serve!(database.url())
        .env("SUTRA_LOG", "warn,sqlx::query=debug")
        .deployed(FAN_OUT)
        .await;
    let thousand = fan_out(&server, "b1000", 1000).await;

    // One body of the thousand fails: the other 999 are withdrawn by one statement.
    let withdrawals = statements(&server, WITHDRAWAL);
    let poll = json!({"worker": "w1", "topics": ["item"], "max": 1, "wait": "PT10S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = &tasks[0];
    let id = task["id"].as_str().expect("a task id");
    let error = json!({"code": "ITEM.BAD", "message": "no"});
    let body = json!({"lock_token": task["lock_token"], "error": error, "retry": false});
    let (status, failed) = server
        .post_json(&format!("/v1/tasks/{id}/fail"), &body)
        .await;
    assert_eq!(status, 200, "{failed}");
    let instance = task["instance"].as_str().expect("its instance");
    let stopped = server.wait_for_status(instance, "completed").await;
    assert_eq!(stopped["vars"]["error"]["code"], "ITEM.BAD", "{stopped}");
    assert_eq!(statements(&server, WITHDRAWAL) - withdrawals, 1);

    let ten = fan_out(&server, "b10", 10).await;
    assert_eq!(
        (ten, thousand),
        (1, 1),
        "one statement inserts a fan-out's tasks"
    );
}
