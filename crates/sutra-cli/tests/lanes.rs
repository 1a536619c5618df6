//! End-to-end: execution lanes (SPEC §6) in real `sutra serve` processes with `--lanes N`.
//!
//! Each test is named after what it protects: correctness that never rests on routing (a
//! mis-routed relay bounces on the claim and is retried; not even on the owner id, now that the
//! claim is taken inside the step's transaction), and the deferred-acknowledgement race
//! of seed 001 (a park and its completing relay on different lanes). The test-only switches they
//! use are documented in `sutra-engine/src/test_switches.rs`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, assert_audit_sequence_is_whole, count_kind, serve};

const FLOWS: &str = r#"
name: lanes
channels:
  counters:
    transport: http
    correlate: data.id
  ticks:
    transport: http
    correlate: data.id
  asks:
    transport: http
    correlate: data.id
    ack: complete
    ack-timeout: PT20S
  answers:
    transport: http
    correlate: data.id
    buffer: PT1M
flows:
  counter:
    start: { channel: counters }
    nodes:
      - id: tick
        receive: { channel: ticks, key: vars.input.id, timeout: PT1H, on-timeout: done }
        output: last
      - id: again
        set: { seen: "= vars.last.n" }
        next: tick
      - id: done
        end: {}
  ask:
    start: { channel: asks }
    nodes:
      - id: wait
        receive: { channel: answers, key: vars.input.id, timeout: PT1M, on-timeout: late }
        output: answer
      - id: reply
        end: { reply: { answer: "= vars.answer.value" } }
      - id: late
        fail: { code: ASK.UNANSWERED, detail: "no answer" }
"#;

/// How long a retried send keeps trying before the test fails.
const RETRY_BOUND: Duration = Duration::from_secs(30);

async fn serve(scratch: &Scratch, lanes: usize, switches: &[&str]) -> Server {
    serve_on(&scratch.database(), lanes, switches).await
}

async fn serve_on(datasource: &str, lanes: usize, switches: &[&str]) -> Server {
    (serve!(datasource).lanes(lanes).switches(switches))
        .deployed(FLOWS)
        .await
}

const CLAIM_HELD: &str = "SUTRA.RUNTIME.RESUME.CLAIM_HELD";

/// How a message's sends were refused before one was accepted.
#[derive(Default)]
struct Refusals {
    /// Refused by the claim (`CLAIM_HELD`): a competing step was seen, nothing was written.
    held: u32,
    /// Refused at commit because the claim was taken meanwhile: two steps ran at once.
    lost: u32,
}

impl std::ops::Add for Refusals {
    type Output = Refusals;
    fn add(self, other: Refusals) -> Refusals {
        Refusals {
            held: self.held + other.held,
            lost: self.lost + other.lost,
        }
    }
}

/// Sends until the message is accepted, resending on the refusals a sender may retry.
async fn send_until_accepted(server: &Server, channel: &str, id: &str, data: Value) -> Refusals {
    let deadline = Instant::now() + RETRY_BOUND;
    let mut refusals = Refusals::default();
    loop {
        let (status, body) = server.send(channel, id, data.clone()).await;
        let detail = body["detail"].as_str().unwrap_or_default();
        match status {
            200 | 202 => return refusals,
            // Both answer the path's CLAIM_HELD code (retryable); only the detail tells a claim
            // lost at commit from a claim refused up front.
            409 if body["code"] == CLAIM_HELD && detail.contains("claim was lost") => {
                refusals.lost += 1
            }
            409 if body["code"] == CLAIM_HELD => refusals.held += 1,
            // A relay resolved to a park the previous relay's step has just answered (stale), or
            // before that step re-armed it (no match): resolved afresh, it finds the new park.
            409 | 404 => {}
            _ => panic!("{channel} {id}: unexpected {status}: {body}"),
        }
        assert!(Instant::now() < deadline, "{id} never accepted: {body}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Starts a counter instance and sends it `ticks` relays at once; returns the instance id and
/// how the relays were refused along the way.
async fn tick_concurrently(server: &Server, ticks: usize) -> (String, Refusals) {
    let (status, body) = server.send("counters", "c-1", json!({"id": "k"})).await;
    assert_eq!(status, 202, "{body}");
    let id = body["instance"].as_str().unwrap().to_owned();
    let sends = (0..ticks).map(|n| {
        let data = json!({"id": "k", "n": n});
        async move { send_until_accepted(server, "ticks", &format!("t-{n}"), data).await }
    });
    let refusals = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .fold(Refusals::default(), |all, one| all + one);
    (id, refusals)
}

/// The value of a counter series in Prometheus text, 0 when absent.
async fn metric(server: &Server, series: &str) -> f64 {
    let text = server
        .http
        .get(server.url("/metrics"))
        .send()
        .await
        .expect("/metrics answers")
        .text()
        .await
        .expect("/metrics has a body");
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_misrouted_relay_bounces_on_the_claim_and_never_interleaves() {
    // On PostgreSQL, where lanes commit side by side: a lane's step holds the instance's row
    // from its claim to its commit, so a mis-routed relay meets it and is refused at once.
    let database = TestDatabase::create().await;
    misrouted_relays_bounce(database.url()).await;
}

#[tokio::test]
async fn a_misrouted_relay_bounces_on_the_embedded_store_too() {
    // On SQLite the single writer orders whole steps: a mis-routed relay waits for the write
    // lock while the holding lane's step holds its instance, and is then refused as held all the
    // same (decision 0048) — so the bounce meter sees a mis-route on this store too.
    let scratch = Scratch::new("misroute");
    misrouted_relays_bounce(&scratch.database()).await;
}

/// Concurrent relays to one instance on two lanes, every other one a stray that a lane takes while
/// the other holds the instance: some bounce, the meter counts each, and each is applied once.
async fn misrouted_relays_bounce(datasource: &str) {
    const TICKS: usize = 60;
    let server = serve_on(datasource, 2, &["SUTRA_TEST_MISROUTE"]).await;
    // Concurrent relays to one instance: every other one strays to a second lane, which finds
    // the holding lane mid-step on the instance.
    let (id, refusals) = tick_concurrently(&server, TICKS).await;

    let history = server.history(&id).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(
        count_kind(&history, "message_received"),
        TICKS,
        "each relay applied exactly once"
    );
    assert!(
        refusals.held > 0,
        "no relay bounced: the mis-route never met a step in flight"
    );
    assert_eq!(
        refusals.lost, 0,
        "the claim and the commit are one transaction: no two steps ever ran at once"
    );
    let metered = metric(&server, r#"sutra_claim_bounces_total{path="relay"}"#).await;
    assert!(
        metered >= f64::from(refusals.held),
        "the meter counted {metered} of {} bounces",
        refusals.held
    );
}

#[tokio::test]
async fn an_instance_is_on_one_lane_at_a_time_so_its_relays_never_bounce() {
    // The lanes take from one queue (decision 0071): a lane takes a request only when no other
    // lane holds its instance, so relays to one instance, sent at once to four lanes, queue
    // behind each other instead of meeting in flight. Not one is refused by the claim, and each
    // is applied once, in a whole history.
    const TICKS: usize = 60;
    let database = TestDatabase::create().await;
    let server = serve_on(database.url(), 4, &[]).await;
    let (id, refusals) = tick_concurrently(&server, TICKS).await;

    let history = server.history(&id).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(count_kind(&history, "message_received"), TICKS);
    assert_eq!(
        (refusals.held, refusals.lost),
        (0, 0),
        "two lanes took one instance's requests at once"
    );
    let metered = metric(&server, r#"sutra_claim_bounces_total{path="relay"}"#).await;
    assert_eq!(metered, 0.0, "the bounce meter reads zero when healthy");
}

#[tokio::test]
async fn two_lanes_never_resume_one_instance_at_once_even_under_one_owner_id() {
    // With the claim taken inside the step's own transaction (decision 0024), the instance's
    // row lock excludes a second step whatever owner id it claims as: the lane-scoped owner id
    // is no longer what keeps two lanes apart (it still keeps administrative claims apart from
    // lanes). With one owner id for the whole process and every other relay mis-routed, no
    // commit is ever refused for a lost claim and no relay is applied twice.
    const TICKS: usize = 60;
    let database = TestDatabase::create().await;
    let switches = ["SUTRA_TEST_MISROUTE", "SUTRA_TEST_PER_PROCESS_OWNER"];
    let server = serve_on(database.url(), 2, &switches).await;
    let (id, refusals) = tick_concurrently(&server, TICKS).await;

    let history = server.history(&id).await;
    assert_audit_sequence_is_whole(&history);
    assert_eq!(count_kind(&history, "message_received"), TICKS);
    assert_eq!(refusals.lost, 0, "two steps ran on one instance at once");
}

#[tokio::test]
async fn every_ack_complete_caller_gets_its_answer_when_park_and_relay_are_on_different_lanes() {
    // Seed 001's one genuine race: the park commits on one lane, the relay that completes the
    // instance runs on another. The mis-route switch lets a lane take every other request
    // whoever holds its instance, so starts (which take no claim) park on one lane while their
    // answers run on another. A caller told to wait must always be answered:
    // its hold is registered before the park commits.
    const ITERATIONS: usize = 200;
    const AT_ONCE: usize = 20;
    let scratch = Scratch::new("lanes-ack-race");
    let server = serve(&scratch, 4, &["SUTRA_TEST_MISROUTE"]).await;
    for batch in 0..ITERATIONS / AT_ONCE {
        let rounds = (0..AT_ONCE).map(|i| {
            let key = format!("a-{batch}-{i}");
            let server = &server;
            async move {
                let (ask_id, answer_id) = (format!("ask-{key}"), format!("ans-{key}"));
                let ask = server.send("asks", &ask_id, json!({"id": key}));
                let data = json!({"id": key, "value": key});
                // Staggered, so that some answers arrive just before the park commits (buffered,
                // matched in the park's transaction) and some just after (relayed at once).
                let stagger = Duration::from_micros(250 * (i % 8) as u64);
                let answer = async move {
                    tokio::time::sleep(stagger).await;
                    send_until_accepted(server, "answers", &answer_id, data).await
                };
                let ((status, body), _) = tokio::join!(ask, answer);
                assert_eq!(status, 200, "{key}: {body}");
                assert_eq!(body, json!({"answer": key}));
            }
        });
        futures_util::future::join_all(rounds).await;
    }
}

#[tokio::test]
async fn metrics_are_open_and_name_every_lane() {
    let scratch = Scratch::new("lanes-metrics");
    let server = serve(&scratch, 3, &[]).await;
    let (status, body) = server.send("counters", "c-1", json!({"id": "m"})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        metric(&server, r#"sutra_steps_total{outcome="committed"}"#).await,
        1.0
    );
    for lane in 0..3 {
        let depth = format!("sutra_lane_queue_depth{{lane=\"{lane}\"}}");
        assert_eq!(metric(&server, &depth).await, 0.0);
    }
    assert_eq!(
        metric(&server, r#"sutra_lease_leader{role="timers"}"#).await,
        1.0
    );
    assert!(
        metric(&server, r#"sutra_group_members_bucket{le="1"}"#).await >= 1.0,
        "the start's group of one is counted"
    );
}
