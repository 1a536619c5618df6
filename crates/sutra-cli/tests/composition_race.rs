//! `race` (issue 33, decision 0050), through the HTTP API of a real `sutra serve`: on SQLite,
//! and on PostgreSQL with two replicas.
//!
//! - The first arm to fire wins: its message's data lands in the arm's `output`, and the
//!   instance goes on at the arm's `next`.
//! - The losing arms are disarmed in the winner's step: a message for one afterwards is an
//!   uncorrelated message (`SUTRA.RUNTIME.RELAY.NO_MATCH`), and changes nothing.
//! - Two arms' messages sent at the same moment, to two replicas: exactly one wins.
//! - A `wait` arm wins when no message comes in time.

mod common;

use common::composition::{self, on_sqlite, on_two_postgres_replicas};
use serde_json::{Value, json};
use sutra_testkit::Server;

const SETTLEMENT: &str = r#"
name: settlement
channels:
  orders: { transport: http, correlate: data.id }
  quotes: { transport: http, correlate: data.id }
  payments: { transport: http, correlate: data.order }
  cancellations: { transport: http, correlate: data.order }
flows:
  settle:
    start: { channel: orders }
    nodes:
      - id: settle
        race:
          - receive: { channel: payments, key: vars.input.id }
            output: payment
            next: paid
          - receive: { channel: cancellations, key: vars.input.id }
            next: cancelled
          - wait: { duration: P1D }
            next: expired
      - id: paid
        end: { reply: paid }
      - id: cancelled
        end: { reply: cancelled }
      - id: expired
        end: { reply: expired }
  quote:
    start: { channel: quotes }
    nodes:
      - id: accept
        race:
          - receive: { channel: payments, key: "'q-' + vars.input.id" }
            next: accepted
          - wait: { duration: PT1S }
            next: lapsed
      - id: accepted
        end: { reply: accepted }
      - id: lapsed
        end: { reply: lapsed }
"#;

/// Starts `id` on `channel`; the race is armed when the start is answered.
async fn start(server: &Server, channel: &str, id: &str) -> String {
    let instance = composition::start(server, channel, id, json!({"id": id})).await;
    assert_eq!(server.instance(&instance).await["status"], "suspended");
    instance
}

async fn pay(server: &Server, order: &str, event: &str) -> (u16, Value) {
    let data = json!({"order": order, "amount": 12});
    send_until_final(server, "payments", event, data).await
}

async fn cancel(server: &Server, order: &str, event: &str) -> (u16, Value) {
    send_until_final(server, "cancellations", event, json!({"order": order})).await
}

/// Sends a message as a sender does: again, unchanged, while the answer says to retry (another
/// replica's step held the instance's claim).
async fn send_until_final(
    server: &Server,
    channel: &str,
    event: &str,
    data: Value,
) -> (u16, Value) {
    loop {
        let (status, body) = server.send(channel, event, data.clone()).await;
        if body["retryable"] != true {
            return (status, body);
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

fn races_won(history: &[Value]) -> Vec<Value> {
    history
        .iter()
        .filter(|e| e["kind"] == "race_won")
        .map(|e| e["detail"].clone())
        .collect()
}

async fn the_first_arm_wins_and_a_late_message_for_another_is_uncorrelated(a: &Server, b: &Server) {
    let instance = start(a, "orders", "o1").await;
    let racing = a.instance(&instance).await;
    let states: Vec<&Value> = racing["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["state"])
        .collect();
    assert_eq!(states[0], "racing", "{racing}");
    assert_eq!(
        states.len(),
        4,
        "the racing token and its three arms: {racing}"
    );

    let (status, paid) = pay(b, "o1", "pay-o1").await;
    assert_eq!(
        (status, &paid["status"]),
        (202, &json!("completed")),
        "{paid}"
    );
    let done = a.wait_for_status(&instance, "completed").await;
    assert_eq!(
        done["vars"]["payment"],
        json!({"order": "o1", "amount": 12})
    );
    assert_eq!(
        races_won(&a.history(&instance).await),
        [json!({"arm": 0, "next": "paid"})]
    );

    let (status, late) = cancel(a, "o1", "cancel-o1").await;
    assert_eq!(
        (status, late["code"].as_str()),
        (404, Some("SUTRA.RUNTIME.RELAY.NO_MATCH")),
        "{late}"
    );
    assert_eq!(a.instance(&instance).await["status"], "completed");
}

async fn two_arms_at_the_same_moment_have_exactly_one_winner(a: &Server, b: &Server) {
    for round in 0..5 {
        let order = format!("same-{round}");
        let instance = start(a, "orders", &order).await;
        let (pay_event, cancel_event) = (format!("pay-{order}"), format!("cancel-{order}"));
        let (paid, cancelled) =
            tokio::join!(pay(a, &order, &pay_event), cancel(b, &order, &cancel_event),);
        let answers = [paid, cancelled];
        let won: Vec<&(u16, Value)> = answers
            .iter()
            .filter(|(status, _)| *status == 202)
            .collect();
        assert_eq!(won.len(), 1, "exactly one arm wins: {answers:?}");
        let lost = answers.iter().find(|(status, _)| *status != 202).unwrap();
        assert_eq!(
            lost.1["code"], "SUTRA.RUNTIME.RELAY.NO_MATCH",
            "{answers:?}"
        );
        let done = a.wait_for_status(&instance, "completed").await;
        assert_eq!(races_won(&a.history(&instance).await).len(), 1, "{done}");
    }
}

async fn a_wait_arm_wins_when_no_message_comes_in_time(a: &Server) {
    let instance = start(a, "quotes", "q1").await;
    let lapsed = a.wait_for_status(&instance, "completed").await;
    let history = a.history(&instance).await;
    assert_eq!(
        races_won(&history),
        [json!({"arm": 1, "next": "lapsed"})],
        "{lapsed}"
    );
    let (status, late) = pay(a, "q-q1", "pay-q1").await;
    assert_eq!(
        (status, late["code"].as_str()),
        (404, Some("SUTRA.RUNTIME.RELAY.NO_MATCH"))
    );
}

async fn every_rule(a: &Server, b: &Server) {
    the_first_arm_wins_and_a_late_message_for_another_is_uncorrelated(a, b).await;
    two_arms_at_the_same_moment_have_exactly_one_winner(a, b).await;
    a_wait_arm_wins_when_no_message_comes_in_time(a).await;
}

#[tokio::test]
async fn races_on_sqlite() {
    let (_scratch, server) = on_sqlite("composition-race", SETTLEMENT).await;
    every_rule(&server, &server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn races_on_postgres_with_two_replicas() {
    let (_database, fleet) = on_two_postgres_replicas("composition-race", SETTLEMENT).await;
    every_rule(fleet.replica(0), fleet.replica(1)).await;
}
