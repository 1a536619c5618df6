//! The lease model (decision 0041): the engine's rule keeps one leader per role in every
//! reachable state of a world whose clocks drift by up to a fifth of the TTL per term, and each
//! plausible regression of the rule is caught by the same check, with the scenario it is known
//! for. The traces are printed (`cargo test -p sutra-model -- --nocapture`) and pasted in
//! docs/protocol.md.

use sutra_model::{
    LEADERSHIP_PASSES, LeaseProtocol, LeaseSetup, ONE_LEADER_PER_ROLE, leases_exhaustively,
    leases_until_failure,
};

/// Checks every reachable state, prints the counts, and returns the report.
fn exhaustively(protocol: LeaseProtocol, setup: LeaseSetup, world: &str) -> sutra_model::Report {
    let report = leases_exhaustively(protocol, setup);
    println!(
        "{protocol:?}, {world}: {} states, depth {}, checked in {:.1?}",
        report.unique_states, report.max_depth, report.elapsed
    );
    report
}

/// The shortest path on which two replicas lead the role at once, printed.
fn two_leaders(protocol: LeaseProtocol, setup: LeaseSetup) -> String {
    let report = leases_until_failure(protocol, setup, ONE_LEADER_PER_ROLE);
    let Some(trace) = report.failed(ONE_LEADER_PER_ROLE) else {
        panic!("{protocol:?} keeps {ONE_LEADER_PER_ROLE}: the check no longer catches it");
    };
    println!(
        "{protocol:?} breaks {ONE_LEADER_PER_ROLE} ({} states, {:.1?}):\n{trace}\n",
        report.unique_states, report.elapsed
    );
    trace.to_owned()
}

fn shows(trace: &str, scenario: &[&str]) {
    for event in scenario {
        assert!(trace.contains(event), "expected `{event}` in:\n{trace}");
    }
}

#[test]
fn no_two_replicas_lead_one_role_at_once() {
    let report = exhaustively(LeaseProtocol::Sutra, LeaseSetup::standard(), "drift 1");
    if let Some(trace) = report.failed(ONE_LEADER_PER_ROLE) {
        panic!("two replicas lead one role:\n{trace}");
    }
    assert!(
        report.example(LEADERSHIP_PASSES).is_some(),
        "no replica ever took the role over: the check proves nothing"
    );
}

#[test]
fn a_term_that_ends_at_the_ttl_lets_two_replicas_lead() {
    let trace = two_leaders(LeaseProtocol::TermEndsAtTheTtl, LeaseSetup::standard());
    shows(
        &trace,
        &[
            "r0's clock falls a tick behind",
            "the lease expires by the database's clock",
            "the lease had expired",
            "r0.0 leads at epoch 1",
            "r1.0 leads at epoch 2",
        ],
    );
}

/// Without drift, a term that ends at the TTL is just safe: the drift is what the margin is for.
#[test]
fn a_term_that_ends_at_the_ttl_keeps_one_leader_only_with_exact_clocks() {
    let protocol = LeaseProtocol::TermEndsAtTheTtl;
    let report = exhaustively(protocol, LeaseSetup::exact_clocks(), "exact clocks");
    if let Some(trace) = report.failed(ONE_LEADER_PER_ROLE) {
        panic!("two replicas lead one role without drift:\n{trace}");
    }
}

#[test]
fn a_term_counted_from_the_reply_lets_two_replicas_lead() {
    let protocol = LeaseProtocol::TermCountedFromTheReply;
    let trace = two_leaders(protocol, LeaseSetup::exact_clocks());
    shows(
        &trace,
        &[
            "the database runs r0's acquire",
            "r0 hears the grant",
            "the lease expires by the database's clock",
            "r1.0 leads at epoch 2",
        ],
    );
}

/// The engine's margin is a fifth of the TTL, and no more: a clock that falls further behind
/// over one term lets two replicas lead.
#[test]
fn drift_past_a_fifth_of_the_ttl_lets_two_replicas_lead() {
    let trace = two_leaders(LeaseProtocol::Sutra, LeaseSetup::drift_past_the_margin());
    shows(
        &trace,
        &[
            "r0's clock falls a tick behind",
            "the lease expires by the database's clock",
            "r1.0 leads at epoch 2",
        ],
    );
}
