//! Each plausible regression of a protocol is caught by the same check, in a world the protocol
//! itself passes (tests/protocol_holds.rs): the test names the property that must fail, and checks
//! that the shortest counterexample is the scenario the regression is known for. The traces are
//! printed (`cargo test -p sutra-model -- --nocapture`) and pasted in docs/protocol.md.

use sutra_model::{
    ASKED_IS_TAKEN, END_REACHES_PARENT, EXCLUSION, NO_LOST_COMMIT, Protocol, Setup, exhaustively,
    until_failure,
};

/// The shortest counterexample to `property` under `protocol` in the standard world, printed.
fn counterexample(protocol: Protocol, property: &'static str) -> String {
    counterexample_in(Setup::standard(), protocol, property)
}

fn counterexample_in(setup: Setup, protocol: Protocol, property: &'static str) -> String {
    let report = until_failure(protocol, setup, property);
    let Some(trace) = report.failed(property) else {
        panic!("{protocol:?} keeps {property}: the check no longer catches this regression");
    };
    println!(
        "{protocol:?} breaks {property} ({} states, {:.1?}):\n{trace}\n",
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
fn per_process_owner_breaks_exclusion() {
    let trace = counterexample(Protocol::PerProcessOwner, EXCLUSION);
    shows(&trace, &["lane-0", "lane-1", ".0, fence 1", ".0, fence 2"]);
}

#[test]
fn no_look_again_strands_an_asked_row() {
    let trace = counterexample(Protocol::NoLookAgain, ASKED_IS_TAKEN);
    shows(&trace, &["parked for a hand-over", "crashes"]);
}

#[test]
fn no_recover_strands_an_asked_row() {
    let trace = counterexample(Protocol::NoRecover, ASKED_IS_TAKEN);
    shows(&trace, &["crashes", "restarts"]);
}

#[test]
fn unfenced_commit_loses_a_commit() {
    let trace = counterexample(Protocol::UnfencedCommit, NO_LOST_COMMIT);
    shows(&trace, &["stalls", "from fence 1: lands"]);
}

#[test]
fn shared_admin_owner_breaks_exclusion() {
    let trace = counterexample(Protocol::SharedAdminOwner, EXCLUSION);
    shows(
        &trace,
        &[
            "admin#0",
            "admin#1",
            ".0/admin, fence 1",
            ".0/admin, fence 2",
        ],
    );
}

#[test]
fn group_ignores_member_claim_breaks_exclusion() {
    let trace = counterexample_in(
        Setup::two_instances_administered(),
        Protocol::GroupIgnoresMemberClaim,
        EXCLUSION,
    );
    shows(
        &trace,
        &[
            "administers instance 1",
            "commits a group",
            ".0/admin's live claim",
        ],
    );
}

/// The child's ending commit leaves its report to a write after it, and a crash falls between:
/// the parent waits for ever. Searched in `call_reported`, where nothing else ends the parent, so
/// that the shortest counterexample is that story alone.
#[test]
fn ask_after_commit_loses_a_child_end() {
    let setup = Setup::call_reported();
    let trace = counterexample_in(setup, Protocol::AskAfterCommit, END_REACHES_PARENT);
    shows(
        &trace,
        &[
            "leaves the ask of row 1 (for instance 0) to a write after the commit",
            "crashes",
            "row 1 unasked",
        ],
    );
}

/// Only the new property sees a lost ask: a row never asked is not in the table, so every other
/// property, AskedIsTaken included, holds in every state of `AskAfterCommit`'s call world.
#[test]
fn only_end_reaches_parent_sees_a_lost_ask() {
    let report = exhaustively(Protocol::AskAfterCommit, Setup::call());
    println!(
        "AskAfterCommit, call: {} states, depth {}, checked in {:.1?}",
        report.unique_states, report.max_depth, report.elapsed
    );
    let failed: Vec<_> = report.failures.iter().map(|(name, _)| *name).collect();
    assert_eq!(failed, [END_REACHES_PARENT]);
}
