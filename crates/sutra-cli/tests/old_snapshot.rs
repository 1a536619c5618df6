//! Snapshots only grow (decision 0004): an instance written by an earlier build loads and runs
//! on this one.
//!
//! `fixtures/before-composition.db` is a SQLite store written by the build before issue 33
//! (races, deadlines, reminders; commit 812f171) — the deployment of
//! `fixtures/before-composition.yaml` and one order suspended inside its `parallel`: a joining
//! token, a task park and a receive park with a timeout. The test serves a copy, answers both
//! parks through the API, and the instance completes.

use serde_json::{Value, json};
use sutra_testkit::{Scratch, Server, serve};

const INSTANCE: &str = "01a242c0-6d63-731f-917a-45ede23d4f29";

#[tokio::test]
async fn an_instance_written_before_composition_runs_to_completion() {
    let scratch = Scratch::new("old-snapshot");
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/before-composition.db"
    );
    std::fs::copy(fixture, scratch.path().join("sutra.db")).expect("copy the fixture");
    let server = Server::start(&serve!(scratch.database()));

    let before = server.instance(INSTANCE).await;
    assert_eq!(before["status"], "suspended", "{before}");
    let states: Vec<&Value> = before["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["state"])
        .collect();
    assert_eq!(
        states,
        [&json!("joining"), &json!("parked"), &json!("parked")]
    );

    let (status, body) = server
        .send("replies", "evt-reply-o1", json!({"id": "o1", "ok": true}))
        .await;
    assert_eq!(status, 202, "{body}");
    let poll = json!({"worker": "w1", "topics": ["pack"], "wait": "PT30S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = &tasks[0];
    assert_eq!(task["input"], json!({"order": "o1"}));
    let done = json!({"lock_token": task["lock_token"], "output": {"box": 7}});
    let id = task["id"].as_str().expect("a task id");
    let (status, body) = server
        .post_json(&format!("/v1/tasks/{id}/complete"), &done)
        .await;
    assert_eq!(status, 200, "{body}");

    let completed = server.wait_for_status(INSTANCE, "completed").await;
    assert_eq!(completed["vars"]["packed"], json!({"box": 7}));
    assert_eq!(completed["vars"]["reply"], json!({"id": "o1", "ok": true}));
}
