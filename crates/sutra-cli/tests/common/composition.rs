//! What the composition tests (`composition_*.rs`: races, deadlines, reminders, for-each) share:
//! a deployment served on SQLite or by two PostgreSQL replicas, an instance started, and a
//! worker's polls and answers through the HTTP API.

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve};

use super::{Fleet, Timing};

/// `deployment` served by one `sutra serve` on a scratch SQLite file (kept while `Scratch` is).
pub async fn on_sqlite(name: &str, deployment: &str) -> (Scratch, Server) {
    let scratch = Scratch::new(name);
    let server = serve!(scratch.database()).deployed(deployment).await;
    (scratch, server)
}

/// `deployment` served by two replicas on a scratch PostgreSQL database: a test starts its
/// instances through one and answers them through the other.
pub async fn on_two_postgres_replicas(name: &str, deployment: &str) -> (TestDatabase, Fleet) {
    let database = TestDatabase::create().await;
    let fleet = Fleet::of(name, 2, Timing::SHORT)
        .start(database.url(), deployment)
        .await;
    (database, fleet)
}

/// Starts an instance on `channel` with `data` (event `start-{id}`); returns its id.
pub async fn start(server: &Server, channel: &str, id: &str, data: Value) -> String {
    let (status, body) = server.send(channel, &format!("start-{id}"), data).await;
    assert_eq!(status, 202, "{body}");
    body["instance"]
        .as_str()
        .expect("an instance id")
        .to_owned()
}

/// Long-polls `topic` for up to `max` tasks, waiting for at least one.
pub async fn poll(server: &Server, topic: &str, max: u32) -> Vec<Value> {
    let poll = json!({"worker": "w1", "topics": [topic], "max": max, "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    tasks.as_array().cloned().expect("an array of tasks")
}

pub async fn complete(server: &Server, task: &Value, output: Value) -> (u16, Value) {
    let id = task["id"].as_str().expect("a task id");
    let body = json!({"lock_token": task["lock_token"], "output": output});
    server
        .post_json(&format!("/v1/tasks/{id}/complete"), &body)
        .await
}

/// Reports a business error (`retry: false`) for `task`.
pub async fn fail(server: &Server, task: &Value, code: &str) -> (u16, Value) {
    let id = task["id"].as_str().expect("a task id");
    let error = json!({"code": code, "message": "none left"});
    let body = json!({"lock_token": task["lock_token"], "error": error, "retry": false});
    server
        .post_json(&format!("/v1/tasks/{id}/fail"), &body)
        .await
}

/// A late answer to a withdrawn task is refused: its lock is gone.
pub async fn assert_lock_lost(server: &Server, task: &Value) {
    let (status, answer) = complete(server, task, json!("too late")).await;
    assert_eq!(
        (status, answer["code"].as_str()),
        (409, Some("SUTRA.TASK.LOCK.LOST")),
        "{answer}"
    );
}

/// The events of `kind` in an instance's history.
pub fn events(history: &[Value], kind: &str) -> Vec<Value> {
    history
        .iter()
        .filter(|e| e["kind"] == kind)
        .cloned()
        .collect()
}
