//! Crash tests of group commit (decision 0024): a real `sutra serve` whose concurrent starts
//! queue behind each other on their lanes and commit as the members of one group, killed with
//! SIGKILL just before and just after such a group's `COMMIT`. Each runs at one lane and at four
//! (`<test>::lanes_1`, `<test>::lanes_4`): at four lanes the same burst is taken as groups by
//! several lanes at once (decision 0071), still groups of several, so other lanes' groups are in
//! flight at the kill too.
//!
//! After the restart every message is sent again until it is accepted. No member is lost (each
//! message starts exactly one instance), none is applied twice (one start each, whole audit
//! sequences), and none was answered before it committed: a start answered before the kill is
//! answered as a duplicate of the same instance afterwards. The history both processes recorded
//! passes the history checker (`common::history`, decision 0043).
//!
//! A group whose `COMMIT` landed but whose answer the connection lost (the `:lose` fault) runs
//! each member again alone: each start finds its own instance, and is answered as the first
//! send it is, not as a duplicate.

mod common;

use std::collections::HashMap;

use common::incarnations::Incarnations;
use serde_json::{Value, json};
use sutra_testkit::{
    Scratch, Server, ServerOptions, assert_audit_sequence_is_whole, at_lanes_1_and_4, count_kind,
    event, serve,
};

const FLOWS: &str = r#"
name: groups
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
      - id: pay
        receive: { channel: payments, key: vars.input.id }
        output: payment
      - id: done
        end: {}
"#;

/// Enough concurrent starts that, on one lane or on each of four, some queue behind a step in
/// flight.
const STARTS: usize = 24;
/// Rounds before the test gives up on ever seeing a group of several members.
const ROUNDS: usize = 3;

at_lanes_1_and_4!(
    a_group_killed_before_its_commit_loses_no_member_and_answered_none,
    a_group_killed_after_its_commit_applies_every_member_once,
    a_group_whose_commit_answer_was_lost_answers_each_start_as_its_first,
);

fn options(scratch: &Scratch) -> ServerOptions {
    serve!(scratch.database())
}

/// Sends every start at once to a server that dies at `fault`; returns the answers that arrived
/// before it died, by message id.
async fn starts_into_fault(server: &mut Server) -> HashMap<String, Value> {
    let sends = (0..STARTS).map(|n| {
        let id = format!("order-{n}");
        let body = event(&id, json!({"id": format!("o{n}")})).to_string();
        let server = &*server;
        async move {
            let answer = server
                .try_post_raw("/v1/channels/orders/messages", body)
                .await;
            (id, answer)
        }
    });
    let answers = futures_util::future::join_all(sends).await;
    answers
        .into_iter()
        .filter_map(|(id, answer)| match answer {
            Some((202, body)) => Some((id, body)),
            Some((status, body)) => panic!("{id}: unexpected {status} before the kill: {body}"),
            None => None,
        })
        .collect()
}

/// Kills a server at `fault` in the middle of a group of starts and checks the restarted one;
/// returns, of the starts that were not answered before the kill, how many had committed.
async fn a_group_killed_at(fault: &str, lanes: usize) -> (usize, usize) {
    for round in 0..ROUNDS {
        let name = format!("{fault}-{round}");
        let scratch = Scratch::new(&name);
        let mut lives = Incarnations::new(&name, lanes);
        let server = lives.deployed(&options(&scratch).fault(fault), FLOWS).await;
        let answered = starts_into_fault(server).await;
        if answered.len() == STARTS {
            // Every start committed as a group of one: the point was never reached. Dropping
            // the processes kills them.
            continue;
        }
        assert!(
            lives.last().wait_for_death(),
            "the server was not killed by a signal"
        );
        let server = lives.start(&options(&scratch));
        let (committed, answers) = check_after_restart(server, &answered).await;
        let told = answers.iter().map(|(id, body)| (id, body));
        for (id, body) in answered.iter().chain(told) {
            lives.accepted(id, body);
        }
        lives.assert_history_clean();
        return (STARTS - answered.len(), committed);
    }
    panic!(
        "no group of several members formed in {ROUNDS} rounds of {STARTS} concurrent starts at \
         {lanes} lane(s)"
    );
}

/// Sends every start again; returns how many of those not answered before the kill had
/// committed, and every answer, by message id.
async fn check_after_restart(
    server: &Server,
    answered: &HashMap<String, Value>,
) -> (usize, Vec<(String, Value)>) {
    let mut answers = Vec::new();
    let mut unanswered_but_committed = 0;
    for n in 0..STARTS {
        let id = format!("order-{n}");
        let (status, body) = server
            .send("orders", &id, json!({"id": format!("o{n}")}))
            .await;
        assert_eq!(status, 202, "{id}: {body}");
        if let Some(first) = answered.get(&id) {
            assert_eq!(
                (body["instance"].as_str(), body["dedup"].as_bool()),
                (first["instance"].as_str(), Some(true)),
                "{id} was answered before the kill, so it must have committed: {body}"
            );
        } else if body["dedup"] == true {
            unanswered_but_committed += 1;
        }
        answers.push((id, body));
    }
    let (_, list) = server.get("/v1/instances?limit=100").await;
    assert_eq!(
        list["items"].as_array().unwrap().len(),
        STARTS,
        "each message started exactly one instance: {list}"
    );
    for (_, body) in &answers {
        let history = server.history(body["instance"].as_str().unwrap()).await;
        assert_audit_sequence_is_whole(&history);
        assert_eq!(count_kind(&history, "started"), 1, "{history:?}");
    }
    (unanswered_but_committed, answers)
}

async fn a_group_killed_before_its_commit_loses_no_member_and_answered_none(lanes: usize) {
    let (unanswered, committed) = a_group_killed_at("before-group-commit", lanes).await;
    assert!(
        committed < unanswered,
        "the killed group's members never committed, so they start afresh after the restart"
    );
}

/// At four lanes the killed group is one lane's; the others' groups in flight at the kill may
/// have committed or not, which the count of committed members only adds to.
async fn a_group_killed_after_its_commit_applies_every_member_once(lanes: usize) {
    let (unanswered, committed) = a_group_killed_at("after-group-commit", lanes).await;
    assert!(
        committed >= 2,
        "the killed group committed its {unanswered} unanswered members' starts, at least two, \
         which the restart answers as duplicates; {committed} were"
    );
}

/// The group's `COMMIT` lands, its answer is lost: its members run again alone and find their
/// own starts committed. Each caller is answered once, with its own instance, and not as a
/// duplicate (the chaos rounds saw a first send answered `dedup` after a connection reset).
async fn a_group_whose_commit_answer_was_lost_answers_each_start_as_its_first(lanes: usize) {
    const FAULT: &str = "after-group-commit";
    for round in 0..ROUNDS {
        let name = format!("lost-commit-{round}");
        let scratch = Scratch::new(&name);
        let mut lives = Incarnations::new(&name, lanes);
        let options = options(&scratch).fault(&format!("{FAULT}:lose"));
        let server = lives.deployed(&options, FLOWS).await;
        let answered = starts_into_fault(server).await;
        assert_eq!(answered.len(), STARTS, "a lost answer kills nothing");
        if !server
            .stderr_text()
            .contains(&format!("fault point {FAULT} lost"))
        {
            // Every start committed as a group of one: the point was never reached.
            continue;
        }
        for (id, body) in &answered {
            assert_eq!(body["dedup"], false, "{id} was sent once: {body}");
            lives.accepted(id, body);
        }
        let instances: std::collections::HashSet<&str> = (answered.values())
            .map(|body| body["instance"].as_str().expect("an instance"))
            .collect();
        assert_eq!(instances.len(), STARTS, "one instance per start");
        let (_, list) = lives.last().get("/v1/instances?limit=100").await;
        assert_eq!(list["items"].as_array().unwrap().len(), STARTS, "{list}");
        lives.assert_history_clean();
        return;
    }
    panic!("no group of several members formed in {ROUNDS} rounds at {lanes} lane(s)");
}
