//! End-to-end: the refusals that say what happened, provoked against a real `sutra serve`.
//!
//! Each condition is set up through the server's own database file, as the process that would
//! cause it in production would leave it: a claim held by another owner, a row a manual edit
//! broke, a wait that moved on between the correlation and the step. Every answer is checked
//! for its status, its code, its retry flag and — on a retryable conflict — `Retry-After`,
//! which is what a client acts on.

use serde_json::{Value, json};
use sqlx::{Connection, SqliteConnection};
use sutra_testkit::{Scratch, Server, count_kind, event, serve, until};

const FLOWS: &str = r#"
name: answers
channels:
  orders:
    transport: http
    correlate: data.id
  payments:
    transport: http
    correlate: data.order
  refusals:
    transport: http
    correlate: data.id
  bank:
    transport: amqp
    queue: bank.replies
    correlate: data.id
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: pay
        receive: { channel: payments, key: vars.input.id }
        output: payment
      - id: done
        end: {}
  refuse:
    start: { channel: refusals }
    nodes:
      - id: no
        fail: { code: ORDER.REFUSED, detail: refused }
"#;

/// An answer as a client sees it: the status, the `Retry-After` header and the body.
struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Value,
}

impl Answer {
    async fn of(response: reqwest::Response) -> Answer {
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().to_owned());
        let body = response.json().await.unwrap();
        Answer {
            status,
            retry_after,
            body,
        }
    }

    /// A retryable conflict with `code`, telling the client when to come back.
    fn assert_busy(&self, code: &str) {
        assert_eq!(
            (self.status, self.body["code"].as_str()),
            (409, Some(code)),
            "{}",
            self.body
        );
        assert_eq!(self.body["retryable"], true, "{}", self.body);
        assert_eq!(self.retry_after.as_deref(), Some("1"), "{}", self.body);
    }
}

async fn post(server: &Server, path: &str) -> Answer {
    Answer::of(server.http.post(server.url(path)).send().await.unwrap()).await
}

async fn get(server: &Server, path: &str) -> Answer {
    Answer::of(server.http.get(server.url(path)).send().await.unwrap()).await
}

async fn send(server: &Server, channel: &str, id: &str, data: Value) -> Answer {
    let response = server
        .http
        .post(server.url(&format!("/v1/channels/{channel}/messages")))
        .header("content-type", "application/cloudevents+json")
        .body(event(id, data).to_string())
        .send()
        .await
        .unwrap();
    Answer::of(response).await
}

/// A deployed server, and a connection to its database file beside it.
async fn deployed(scratch: &Scratch) -> (Server, SqliteConnection) {
    // `bank` is an amqp channel: a deployment declaring it needs the broker's URL.
    let server = serve!(scratch.database()).amqp().deployed(FLOWS).await;
    let database = SqliteConnection::connect(&scratch.database())
        .await
        .unwrap();
    (server, database)
}

/// Starts an instance on `channel` and gives its id.
async fn started(server: &Server, channel: &str, key: &str) -> String {
    let answer = send(server, channel, &format!("start-{key}"), json!({"id": key})).await;
    assert_eq!(answer.status, 202, "{}", answer.body);
    answer.body["instance"].as_str().unwrap().to_owned()
}

async fn execute(database: &mut SqliteConnection, sql: &str, instance: &str) {
    let changed = sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .bind(instance)
        .execute(&mut *database)
        .await
        .unwrap()
        .rows_affected();
    assert!(changed > 0, "{sql} changed nothing for {instance}");
}

/// Claims the instance for another owner, as a step in flight on another replica holds it: the
/// store's compare-and-set, written directly, with a claim far younger than the claim timeout.
async fn hold_claim(database: &mut SqliteConnection, instance: &str) {
    let now = jiff::Timestamp::now().as_microsecond();
    let sql = format!(
        "UPDATE instances SET owner = 'elsewhere/lane-0', claimed_at = {now}, fence = fence + 1 \
         WHERE id = ?1"
    );
    execute(database, &sql, instance).await;
}

async fn release_claim(database: &mut SqliteConnection, instance: &str) {
    let sql = "UPDATE instances SET owner = NULL, claimed_at = NULL WHERE id = ?1";
    execute(database, sql, instance).await;
}

#[tokio::test]
async fn cancel_and_relay_refuse_a_held_claim_with_their_codes_and_a_restore_is_asked_for_later() {
    let scratch = Scratch::new("answers-claim-held");
    let (server, mut database) = deployed(&scratch).await;
    let failed = started(&server, "refusals", "r1").await;
    let waiting = started(&server, "orders", "o1").await;
    hold_claim(&mut database, &failed).await;
    hold_claim(&mut database, &waiting).await;

    // A bulk restore acts on each instance at once: a held claim is its refusal.
    let bulk = json!({"filter": {"status": "failed"}, "action": "restore"});
    let (_, page) = server.post_json("/v1/instances/bulk", &bulk).await;
    assert_eq!(
        (&page["results"][0]["outcome"], &page["results"][0]["code"]),
        (&json!("refused"), &json!("SUTRA.ADMIN.RESTORE.CLAIM_HELD")),
        "{page}"
    );
    // A single restore is asked as a delivery instead, taken once the claim is free.
    let asked = post(&server, &format!("/v1/instances/{failed}/restore")).await;
    assert_eq!(
        (asked.status, &asked.body["status"], &asked.body["restore"]),
        (202, &json!("failed"), &json!("asked")),
        "{}",
        asked.body
    );
    post(&server, &format!("/v1/instances/{waiting}/cancel"))
        .await
        .assert_busy("SUTRA.ADMIN.CANCEL.CLAIM_HELD");
    send(&server, "payments", "pay-o1", json!({"order": "o1"}))
        .await
        .assert_busy("SUTRA.RUNTIME.RESUME.CLAIM_HELD");

    // Nothing was written but the asked restore: once the claim is free, it is taken, and the
    // same relay goes through.
    release_claim(&mut database, &failed).await;
    release_claim(&mut database, &waiting).await;
    // (Restored, its `fail` node fails it again at once.)
    until("the asked restore is taken", async || {
        count_kind(&server.history(&failed).await, "restored") > 0
    })
    .await;
    let paid = send(&server, "payments", "pay-o1", json!({"order": "o1"})).await;
    assert_eq!(
        (paid.status, &paid.body["status"]),
        (202, &json!("completed")),
        "{}",
        paid.body
    );
}

#[tokio::test]
async fn corrupt_instance_data_answers_a_500_that_no_retry_can_fix() {
    let scratch = Scratch::new("answers-corrupt");
    let (server, mut database) = deployed(&scratch).await;
    let instance = started(&server, "orders", "o1").await;
    let broken = "UPDATE instances SET snapshot = '{\"truncated' WHERE id = ?1";
    execute(&mut database, broken, &instance).await;

    let answer = get(&server, &format!("/v1/instances/{instance}")).await;
    assert_eq!(
        (answer.status, answer.body["code"].as_str()),
        (500, Some("SUTRA.STORE.CORRUPT")),
        "{}",
        answer.body
    );
    assert_eq!(answer.body["retryable"], false, "{}", answer.body);
    assert_eq!(answer.retry_after, None);
}

#[tokio::test]
async fn a_relay_to_a_wait_that_moved_on_answers_relay_stale_and_is_not_consumed() {
    let scratch = Scratch::new("answers-stale-relay");
    let (server, mut database) = deployed(&scratch).await;
    let instance = started(&server, "orders", "o1").await;
    // The wait row names a park the instance no longer holds, as it does for the moment between
    // a step answering the park and its commit removing the row.
    let moved_on = "UPDATE waits SET park = park + 1000 WHERE instance = ?1";
    execute(&mut database, moved_on, &instance).await;

    let stale = send(&server, "payments", "pay-o1", json!({"order": "o1"})).await;
    stale.assert_busy("SUTRA.RUNTIME.RELAY.STALE");
    let snapshot = get(&server, &format!("/v1/instances/{instance}")).await;
    assert_eq!(snapshot.body["status"], "suspended", "{}", snapshot.body);

    // Sent again unchanged once the wait is current, the same event id is applied: the stale
    // relay consumed nothing.
    let current = "UPDATE waits SET park = park - 1000 WHERE instance = ?1";
    execute(&mut database, current, &instance).await;
    let paid = send(&server, "payments", "pay-o1", json!({"order": "o1"})).await;
    assert_eq!(
        (paid.status, &paid.body["dedup"], &paid.body["status"]),
        (202, &json!(false), &json!("completed")),
        "{}",
        paid.body
    );
}

#[tokio::test]
async fn a_message_for_a_broker_channel_is_refused_over_http_and_changes_nothing() {
    let scratch = Scratch::new("answers-broker-channel");
    let (server, mut database) = deployed(&scratch).await;

    let refused = send(&server, "bank", "reply-1", json!({"id": "o1"})).await;

    assert_eq!(
        (refused.status, refused.body["code"].as_str()),
        (409, Some("SUTRA.INTAKE.CHANNEL.TRANSPORT")),
        "{}",
        refused.body
    );
    assert_eq!(refused.body["retryable"], false, "{}", refused.body);
    let kept: i64 =
        sqlx::query_scalar("SELECT (SELECT count(*) FROM inbox) + (SELECT count(*) FROM buffered)")
            .fetch_one(&mut database)
            .await
            .unwrap();
    assert_eq!(kept, 0, "nothing of the refused message was kept");
}
