//! Crash tests: a real `sutra serve` killed with SIGKILL at chosen points (SUTRA_FAULT), then
//! restarted on the same database file; each at one engine lane and at four
//! (`sutra_testkit::at_lanes_1_and_4!`: `<test>::lanes_1`, `<test>::lanes_4`).
//!
//! After every restart: no instance is lost, none is advanced twice (the audit sequence has no
//! gap and no duplicate), every accepted message is consumed exactly once, and every asked
//! delivery is taken again. A kill inside a step ends its transaction uncommitted, and with it
//! the step's claim (decision 0024: the claim is that transaction's lock), so nothing is left
//! for the sweep: the restarted process takes the work as soon as it is asked again. And the
//! history every process recorded passes the history checker (`common::history`, decision
//! 0043): one chain of commits per instance, no answer before its commit, each start consumed
//! once.

mod common;

use std::time::Duration;

use common::incarnations::Incarnations;
use serde_json::{Value, json};
use sutra_testkit::{
    Scratch, Server, ServerOptions, assert_audit_sequence_is_whole, at_lanes_1_and_4, count_kind,
    serve,
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
/// Rounds of the kills whose moment varies with the machine's timing, at each lane count.
const ROUNDS: usize = 3;

at_lanes_1_and_4!(
    a_step_killed_after_its_claim_rolls_back_and_its_message_is_taken_once,
    a_reply_lost_after_the_commit_is_answered_as_a_duplicate,
    a_start_killed_before_its_reply_is_not_started_twice,
    a_timer_fire_killed_midway_is_taken_after_restart,
    a_timer_step_killed_after_its_claim_rolls_back_and_is_taken_after_restart,
    a_panicking_step_releases_its_claim,
    a_step_that_keeps_killing_its_replica_poisons_its_instance_through_its_delivery,
    a_delivery_that_keeps_killing_its_replica_poisons_its_instance,
);

fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database())
        .claim_timeout(CLAIM_TIMEOUT)
        .sweep_interval(SWEEP_INTERVAL)
}

/// Starts order `id` on the process up, recording the answer for the history checker.
async fn start_order(lives: &mut Incarnations, id: &str, cool: bool) -> String {
    let event_id = format!("order-{id}");
    let (status, body) = (lives.last())
        .send("orders", &event_id, json!({"id": id, "cool": cool}))
        .await;
    assert_eq!(status, 202, "{body}");
    lives.accepted(&event_id, &body);
    body["instance"].as_str().unwrap().to_owned()
}

/// Pays order `id`, which waits for it: accepted at once, since no step holds its instance.
async fn pay(server: &Server, id: &str) -> Value {
    let (status, body) = server
        .send("payments", &format!("pay-{id}"), payment(id))
        .await;
    assert_eq!(status, 202, "{body}");
    body
}

fn payment(id: &str) -> Value {
    json!({"order": id, "amount": 5})
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

/// The payment's step dies after its claim, before its commit. Its transaction never committed,
/// and its claim was that transaction's: the restarted process is not refused, and the resent
/// payment is taken at once — as a first consumption, not a duplicate.
async fn a_step_killed_after_its_claim_rolls_back_and_its_message_is_taken_once(lanes: usize) {
    for round in 0..ROUNDS {
        let scratch = Scratch::new("after-claim");
        let mut lives = Incarnations::new("after-claim", lanes);
        (lives.deployed(&options(&scratch).fault("after-claim"), FLOWS)).await;
        let id = format!("a{round}");
        let instance = start_order(&mut lives, &id, false).await;
        (lives.last())
            .send_into_fault("payments", &format!("pay-{id}"), payment(&id))
            .await;

        let server = lives.start(&options(&scratch));
        let body = pay(server, &id).await;
        assert_eq!(
            (body["instance"].as_str(), body["dedup"].as_bool()),
            (Some(instance.as_str()), Some(false)),
            "{body}"
        );
        assert_paid_exactly_once(server, &instance).await;
        lives.assert_history_clean();
    }
}

async fn a_reply_lost_after_the_commit_is_answered_as_a_duplicate(lanes: usize) {
    for round in 0..ROUNDS {
        let scratch = Scratch::new("after-commit");
        let mut lives = Incarnations::new("after-commit", lanes);
        (lives.deployed(&options(&scratch).fault("after-commit"), FLOWS)).await;
        let id = format!("b{round}");
        let instance = start_order(&mut lives, &id, false).await;
        (lives.last())
            .send_into_fault("payments", &format!("pay-{id}"), payment(&id))
            .await;

        let server = lives.start(&options(&scratch));
        let body = pay(server, &id).await;
        assert_eq!(
            (body["instance"].as_str(), body["dedup"].as_bool()),
            (Some(instance.as_str()), Some(true)),
            "{body}"
        );
        assert_paid_exactly_once(server, &instance).await;
        lives.assert_history_clean();
    }
}

async fn a_start_killed_before_its_reply_is_not_started_twice(lanes: usize) {
    let scratch = Scratch::new("after-start-commit");
    let mut lives = Incarnations::new("after-start-commit", lanes);
    (lives.deployed(&options(&scratch).fault("after-start-commit"), FLOWS)).await;
    let order = json!({"id": "s1", "cool": false});
    (lives.last())
        .send_into_fault("orders", "order-s1", order.clone())
        .await;

    let server = lives.start(&options(&scratch));
    let (status, body) = server.send("orders", "order-s1", order).await;
    assert_eq!(
        (status, body["dedup"].as_bool()),
        (202, Some(true)),
        "{body}"
    );
    let (_, list) = server.get("/v1/instances").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    lives.accepted("order-s1", &body);
    lives.assert_history_clean();
}

/// Starts an order that cools off on a timer and waits for a payment, on a process that dies at
/// `fault` as it runs the timer; then restarts, and checks that the timer fired once and the
/// order was paid once.
async fn a_timer_killed_at(fault: &str, lanes: usize) {
    let scratch = Scratch::new(fault);
    let mut lives = Incarnations::new(fault, lanes);
    (lives.deployed(&options(&scratch).fault(fault), FLOWS)).await;
    let instance = start_order(&mut lives, "t1", true).await;
    assert!(lives.last().wait_for_death(), "the timer never fired");

    let server = lives.start(&options(&scratch));
    server.wait_for_node(&instance, "pay").await;
    pay(server, "t1").await;
    assert_paid_exactly_once(server, &instance).await;
    assert_eq!(
        count_kind(&server.history(&instance).await, "timer_fired"),
        1
    );
    lives.assert_history_clean();
}

/// The dispatcher dies as it takes the timer, before any step: the delivery, handed out but never
/// taken, is due again a claim timeout later and taken then.
async fn a_timer_fire_killed_midway_is_taken_after_restart(lanes: usize) {
    a_timer_killed_at("timer-fire", lanes).await;
}

/// The timer's step dies after its claim, before its commit: the transaction rolls back, and its
/// claim with it, so nothing is left for the sweep to clear. The delivery, handed out but never
/// taken, is due again a claim timeout later and the restarted process takes it then.
async fn a_timer_step_killed_after_its_claim_rolls_back_and_is_taken_after_restart(lanes: usize) {
    a_timer_killed_at("after-claim", lanes).await;
}

/// The step panics just before its commit. The panic is caught where the step runs and is not
/// re-raised: the caller is answered `SUTRA.RUNTIME.STEP.PANICKED`, a retryable 500, the step's
/// transaction rolls back and its claim (the row lock) with it, and the lane goes on — so the
/// very next attempt, on the same lane at any lane count (a lane owns its instances), is not
/// refused.
async fn a_panicking_step_releases_its_claim(lanes: usize) {
    let scratch = Scratch::new("panic");
    let mut lives = Incarnations::new("panic", lanes);
    (lives.deployed(&options(&scratch).fault("before-commit@2:panic"), FLOWS)).await;
    let instance = start_order(&mut lives, "p1", false).await;
    let server = lives.last();
    let (status, body) = server.send("payments", "pay-p1", payment("p1")).await;
    assert_eq!(status, 500, "{body}");
    let (status, body) = server.send("payments", "pay-p1", payment("p1")).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (202, Some("completed")),
        "{body}"
    );
    assert_paid_exactly_once(server, &instance).await;
    lives.assert_history_clean();
}

/// Every process dies on `fault` as it runs the order's timer, past max-recoveries processes in
/// a row; the instance ends failed as poisoned, and the last process recorded that.
async fn poisoned_by(fault: &str, lanes: usize) -> usize {
    let scratch = Scratch::new(fault);
    let mut lives = Incarnations::new(&format!("poison-{fault}"), lanes);
    let doomed = (options(&scratch).fault(fault)).env("SUTRA_INSTANCE_MAX_RECOVERIES", "2");
    // A longer cool-off, so that the start is answered before the timer kills the process even
    // on a loaded machine.
    (lives.deployed(&doomed, &FLOWS.replace("PT0.2S", "PT2S"))).await;
    let instance = start_order(&mut lives, "x1", true).await;
    let mut deaths = 0;
    for _ in 0..10 {
        if !(lives.last())
            .wait_for_death_or_status(&instance, "failed")
            .await
        {
            break;
        }
        deaths += 1;
        lives.start(&doomed);
    }
    let server = lives.last();
    let failed = server.wait_for_status(&instance, "failed").await;
    assert_eq!(
        failed["failure"]["code"], "SUTRA.RUNTIME.STEP.POISONED",
        "{failed}"
    );
    assert_audit_sequence_is_whole(&server.history(&instance).await);
    assert_eq!(
        count_kind(&server.history(&instance).await, "timer_fired"),
        0,
        "the timer never ran: {instance}"
    );
    assert_poisoning_recorded(server, &instance);
    lives.assert_history_clean();
    deaths
}

/// Every process dies on its first claim, inside the timer's step. Each death rolls the step's
/// transaction back, its claim with it: no claim is left for the sweep to count. What counts is
/// the timer delivery's dispatches, as when the process dies before the claim (below): past
/// max-recoveries the dispatcher fails the instance instead of handing the timer out once more.
async fn a_step_that_keeps_killing_its_replica_poisons_its_instance_through_its_delivery(
    lanes: usize,
) {
    let deaths = poisoned_by("after-claim", lanes).await;
    assert_eq!(deaths, 2, "one death per dispatch up to max-recoveries");
}

/// Every process dies as its dispatcher takes the timer, before any claim: only the delivery's
/// dispatch count tells. Past max-recoveries the dispatcher fails the instance instead of
/// handing the timer out once more.
async fn a_delivery_that_keeps_killing_its_replica_poisons_its_instance(lanes: usize) {
    let deaths = poisoned_by("timer-fire", lanes).await;
    assert_eq!(deaths, 2, "one death per dispatch up to max-recoveries");
}

/// The replica that poisoned `instance` — the one up once it failed: every other died before —
/// recorded the poisoning in its history log as a commit of kind `poison`, like any step's.
fn assert_poisoning_recorded(server: &mut Server, instance: &str) {
    let line = server.wait_for_stderr(r#""kind":"poison""#);
    assert!(
        line.contains(r#""ev":"commit""#) && line.contains(instance),
        "{line}"
    );
}
