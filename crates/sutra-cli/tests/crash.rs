//! Crash tests: a real `sutra serve` killed with SIGKILL at chosen points (SUTRA_FAULT), then
//! restarted on the same database file.
//!
//! After every restart: no instance is lost, none is advanced twice (the audit sequence has no
//! gap and no duplicate), every accepted message is consumed exactly once, and every asked
//! delivery is taken within claim-timeout plus sweep-interval (both shortened here).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_testkit::{
    Scratch, Server, ServerOptions, assert_audit_sequence_is_whole, count_kind, serve, until_ok,
};

const FLOWS: &str = r#"
name: crash
channels:
  orders:
    transport: http
    correlate: data.id
  payments:
    transport: http
    correlate: data.order
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: route
        choice:
          - when: vars.input.cool
            next: cool-off
        otherwise: pay
      - id: cool-off
        wait: { duration: PT0.2S }
      - id: pay
        receive: { channel: payments, key: vars.input.id }
        output: payment
      - id: done
        end: { reply: { paid: "= vars.payment.amount" } }
"#;

const CLAIM_TIMEOUT: Duration = Duration::from_secs(1);
const SWEEP_INTERVAL: Duration = Duration::from_millis(500);

fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database())
        .claim_timeout(CLAIM_TIMEOUT)
        .sweep_interval(SWEEP_INTERVAL)
}

async fn start_order(server: &Server, id: &str, cool: bool) -> String {
    let (status, body) = server
        .send(
            "orders",
            &format!("order-{id}"),
            json!({"id": id, "cool": cool}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["instance"].as_str().unwrap().to_owned()
}

/// Sends until the answer is not a retry-safe refusal, checking that refusals are well-formed.
async fn send_until_accepted(server: &Server, channel: &str, id: &str, data: Value) -> Value {
    until_ok(async || {
        let (status, body) = server.send(channel, id, data.clone()).await;
        if status != 409 {
            assert_eq!(status, 202, "{body}");
            return Ok(body);
        }
        assert_eq!(body["code"], "SUTRA.RUNTIME.RESUME.CLAIM_HELD", "{body}");
        Err("the dead holder's claim was never cleared".to_owned())
    })
    .await
}

async fn assert_paid_exactly_once(server: &Server, instance: &str) {
    let finished = server.wait_for_status(instance, "completed").await;
    assert_eq!(finished["vars"]["payment"]["amount"], 5);
    let history = server.history(instance).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(
        count_kind(&history, "message_received"),
        1,
        "the payment was consumed twice: {history:?}"
    );
    assert_eq!(count_kind(&history, "completed"), 1);
}

#[tokio::test]
async fn a_holder_killed_after_its_claim_is_cleared_and_the_relay_is_taken_once() {
    for round in 0..3 {
        let scratch = Scratch::new("after-claim");
        let mut server = options(&scratch).fault("after-claim").deployed(FLOWS).await;
        let instance = start_order(&server, &format!("a{round}"), false).await;
        server
            .send_into_fault(
                "payments",
                "pay-1",
                json!({"order": format!("a{round}"), "amount": 5}),
            )
            .await;

        let server = Server::start(&options(&scratch));
        let body = send_until_accepted(
            &server,
            "payments",
            "pay-1",
            json!({"order": format!("a{round}"), "amount": 5}),
        )
        .await;
        assert_eq!(
            (body["instance"].as_str(), body["dedup"].as_bool()),
            (Some(instance.as_str()), Some(false))
        );
        assert_paid_exactly_once(&server, &instance).await;
    }
}

#[tokio::test]
async fn a_reply_lost_after_the_commit_is_answered_as_a_duplicate() {
    for round in 0..3 {
        let scratch = Scratch::new("after-commit");
        let mut server = options(&scratch)
            .fault("after-commit")
            .deployed(FLOWS)
            .await;
        let instance = start_order(&server, &format!("b{round}"), false).await;
        server
            .send_into_fault(
                "payments",
                "pay-1",
                json!({"order": format!("b{round}"), "amount": 5}),
            )
            .await;

        let server = Server::start(&options(&scratch));
        let (status, body) = server
            .send(
                "payments",
                "pay-1",
                json!({"order": format!("b{round}"), "amount": 5}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        assert_eq!(
            (body["instance"].as_str(), body["dedup"].as_bool()),
            (Some(instance.as_str()), Some(true))
        );
        assert_paid_exactly_once(&server, &instance).await;
    }
}

#[tokio::test]
async fn a_start_killed_before_its_reply_is_not_started_twice() {
    let scratch = Scratch::new("after-start-commit");
    let mut server = options(&scratch)
        .fault("after-start-commit")
        .deployed(FLOWS)
        .await;
    server
        .send_into_fault("orders", "order-s1", json!({"id": "s1", "cool": false}))
        .await;

    let server = Server::start(&options(&scratch));
    let (status, body) = server
        .send("orders", "order-s1", json!({"id": "s1", "cool": false}))
        .await;
    assert_eq!(
        (status, body["dedup"].as_bool()),
        (202, Some(true)),
        "{body}"
    );
    let (_, list) = server.get("/v1/instances").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn a_timer_fire_killed_midway_is_taken_after_restart() {
    let scratch = Scratch::new("timer-fire");
    let mut server = options(&scratch).fault("timer-fire").deployed(FLOWS).await;
    let instance = start_order(&server, "t1", true).await;
    assert!(server.wait_for_death(), "the timer never fired");

    let server = Server::start(&options(&scratch));
    server.wait_for_node(&instance, "pay").await;
    send_until_accepted(
        &server,
        "payments",
        "pay-t1",
        json!({"order": "t1", "amount": 5}),
    )
    .await;
    assert_paid_exactly_once(&server, &instance).await;
    assert_eq!(
        count_kind(&server.history(&instance).await, "timer_fired"),
        1
    );
}

#[tokio::test]
async fn asked_is_taken_after_holder_dies() {
    // The timer's delivery is claimed, then its holder dies holding the claim. The restarted
    // process is refused by that claim, looks again, and takes the delivery once the sweep has
    // cleared it: within claim-timeout plus sweep-interval (plus slack for a slow machine).
    let scratch = Scratch::new("asked-taken");
    let mut server = options(&scratch).fault("after-claim").deployed(FLOWS).await;
    let instance = start_order(&server, "k1", true).await;
    assert!(server.wait_for_death(), "the timer's claim was never taken");

    let restarted = Instant::now();
    let server = Server::start(&options(&scratch));
    server.wait_for_node(&instance, "pay").await;
    let bound = CLAIM_TIMEOUT + SWEEP_INTERVAL + Duration::from_secs(10);
    assert!(
        restarted.elapsed() < bound,
        "took {:?}, bound {bound:?}",
        restarted.elapsed()
    );
    send_until_accepted(
        &server,
        "payments",
        "pay-k1",
        json!({"order": "k1", "amount": 5}),
    )
    .await;
    assert_paid_exactly_once(&server, &instance).await;
    assert_eq!(
        count_kind(&server.history(&instance).await, "timer_fired"),
        1
    );
}

#[tokio::test]
async fn a_panicking_step_releases_its_claim() {
    // The step panics just before its commit. The panic is caught where the step runs and is
    // not re-raised: the caller is answered `SUTRA.RUNTIME.STEP.PANICKED`, a retryable 500, the
    // step's transaction rolls back and its claim (the row lock) with it, and the lane goes on —
    // so the very next attempt is not refused.
    let scratch = Scratch::new("panic");
    let server = options(&scratch)
        .fault("before-commit@2:panic")
        .deployed(FLOWS)
        .await;
    let instance = start_order(&server, "p1", false).await;
    let (status, body) = server
        .send("payments", "pay-p1", json!({"order": "p1", "amount": 5}))
        .await;
    assert_eq!(status, 500, "{body}");
    let (status, body) = server
        .send("payments", "pay-p1", json!({"order": "p1", "amount": 5}))
        .await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("completed")),
        "{body}"
    );
    assert_paid_exactly_once(&server, &instance).await;
}

#[tokio::test]
async fn a_step_that_keeps_killing_its_replica_is_poisoned() {
    // Every process dies on its first claim. The sweep counts the recoveries and, after
    // max-recoveries in a row, fails the instance instead of letting it crash-loop the fleet.
    let scratch = Scratch::new("poison");
    let doomed_options = options(&scratch)
        .fault("after-claim")
        .env("SUTRA_INSTANCE_MAX_RECOVERIES", "2")
        .env("SUTRA_LOG", HISTORY_LOG);
    let mut server = Server::start(&doomed_options);
    // A longer cool-off, so that the start is answered before the first claim kills the process
    // even on a loaded machine.
    server
        .deploy_accepted(&FLOWS.replace("PT0.2S", "PT2S"))
        .await;
    let instance = start_order(&server, "x1", true).await;
    for _ in 0..10 {
        if !server.wait_for_death_or_status(&instance, "failed").await {
            break;
        }
        server = Server::start(&doomed_options);
    }
    let failed = server.wait_for_status(&instance, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.STEP.POISONED",
        "{failed}"
    );
    let history = server.history(&instance).await;
    assert_audit_sequence_is_whole(&history);
    assert_poisoning_recorded(&mut server, &instance);
}

#[tokio::test]
async fn a_delivery_that_keeps_killing_its_replica_poisons_its_instance() {
    // Every process dies as its dispatcher takes the timer, before any claim: no durable claim
    // is left for the sweep to count, only the delivery's dispatch count. Past max-recoveries
    // the dispatcher fails the instance instead of handing the timer out once more.
    let scratch = Scratch::new("poison-delivery");
    let doomed_options = options(&scratch)
        .fault("timer-fire")
        .env("SUTRA_INSTANCE_MAX_RECOVERIES", "2")
        .env("SUTRA_LOG", HISTORY_LOG);
    let mut server = Server::start(&doomed_options);
    // A longer cool-off, so that the start is answered before the timer kills the process even
    // on a loaded machine.
    server
        .deploy_accepted(&FLOWS.replace("PT0.2S", "PT2S"))
        .await;
    let instance = start_order(&server, "d1", true).await;
    let mut deaths = 0;
    for _ in 0..10 {
        if !server.wait_for_death_or_status(&instance, "failed").await {
            break;
        }
        deaths += 1;
        server = Server::start(&doomed_options);
    }
    let failed = server.wait_for_status(&instance, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.STEP.POISONED",
        "{failed}"
    );
    assert_eq!(deaths, 2, "one death per dispatch up to max-recoveries");
    let history = server.history(&instance).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(
        count_kind(&history, "timer_fired"),
        0,
        "the timer never ran: {history:?}"
    );
    assert_poisoning_recorded(&mut server, &instance);
}

/// The history log (decision 0043) on, besides the warnings.
const HISTORY_LOG: &str = "warn,sutra::history=info";

/// The replica that poisoned `instance` — the one up once it failed: every other died before —
/// recorded the poisoning in its history log as a commit of kind `poison`, like any step's.
fn assert_poisoning_recorded(server: &mut Server, instance: &str) {
    let line = server.wait_for_stderr(r#""kind":"poison""#);
    assert!(
        line.contains(r#""ev":"commit""#) && line.contains(instance),
        "{line}"
    );
}
