//! The deferred acknowledgement (SPEC §5.3, `ack: complete`): a caller held until its instance
//! ends is registered before the step that could end it commits, and a step that does not
//! commit takes its caller's registration with it — the caller is answered, and nothing is left
//! registered to be told of an end nobody waits for.

mod common;

use std::sync::Arc;

use serde_json::json;
use sutra_core::step::Reply;
use sutra_engine::intake::{Answer, Inbound};
use sutra_engine::{Engine, EngineConfig};

use common::Harness;

/// A caller of `asks` is held until its instance has its answer.
const ASKS: &str = r#"
name: asks
channels:
  asks: { transport: http, correlate: data.id, ack: complete, ack-timeout: PT1H }
  answers: { transport: http, correlate: data.id }
flows:
  ask:
    start: { channel: asks }
    nodes:
      - id: wait
        receive: { channel: answers, key: vars.input.id }
      - id: done
        end: { reply: { answered: true } }
"#;

fn ask(id: &str) -> Inbound {
    common::inbound("asks", id, json!({"id": "k"}))
}

async fn until_held(engine: &Engine, callers: usize) {
    common::eventually(&format!("{callers} held callers"), || async {
        (engine.held_callers() == callers).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_caller_whose_step_does_not_commit_is_answered_and_deregistered() {
    let harness = Harness::start(ASKS, EngineConfig::default()).await;
    let engine = Arc::clone(&harness.engine);
    let first = tokio::spawn(async move { engine.intake(ask("ask-1")).await });
    until_held(&harness.engine, 1).await;

    // The same message again: its start registers its caller, then its commit is refused — the
    // message was consumed by the first. The caller is answered as a duplicate at once.
    let again = harness.engine.intake(ask("ask-1")).await;
    assert!(
        matches!(again, Ok(Answer::Accepted { dedup: true, .. })),
        "{again:?}"
    );
    assert_eq!(
        harness.engine.held_callers(),
        1,
        "the caller of the step that did not commit is still registered"
    );

    let instance = harness
        .send("answers", "answer-1", json!({"id": "k"}))
        .await;
    let answered = first.await.unwrap();
    let Ok(Answer::Ended {
        instance: ended,
        reply,
    }) = answered
    else {
        panic!("the first caller is answered at the end: {answered:?}");
    };
    assert_eq!(ended, instance);
    assert_eq!(reply, Reply::Completed(json!({"answered": true})));
    assert_eq!(harness.engine.held_callers(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_caller_that_goes_away_is_deregistered() {
    let harness = Harness::start(ASKS, EngineConfig::default()).await;
    let engine = Arc::clone(&harness.engine);
    let first = tokio::spawn(async move { engine.intake(ask("ask-1")).await });
    until_held(&harness.engine, 1).await;

    // Its future dropped, as when its HTTP client disconnects or its broker consumer stops,
    // long before the instance ends or the channel's `ack-timeout` passes.
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    until_held(&harness.engine, 0).await;
}
