//! Both protocols keep every property in every reachable state of their worlds: the engine's
//! two-phase protocol (`Protocol::Sutra`) in `Setup::standard`, `Setup::two_instances` and
//! `Setup::call_reported`, and decision 0024's one-transaction protocol
//! (`Protocol::OneTransaction`) in the first two, in one where a group can meet an
//! administrative claim, in one with a poison pill, and in `Setup::call` (issue 33: rows asked by
//! another instance's end, a child's report and a parent's cancel). One exhaustive check per
//! protocol and world is shared by the tests, which each read their own property's verdict.

use std::sync::OnceLock;

use sutra_model::{
    ASKED_IS_TAKEN, CLAIM_NOT_FOREVER, COMMITTED_IMPLIES_UNOWNED, END_REACHES_PARENT, EXCLUSION,
    NO_LOST_COMMIT, POISONED, Protocol, Report, Setup, exhaustively,
};

struct Checked {
    protocol: Protocol,
    world: &'static str,
    report: Report,
}

fn reports() -> &'static [Checked] {
    static REPORTS: OnceLock<Vec<Checked>> = OnceLock::new();
    REPORTS.get_or_init(|| {
        let checks = [
            (Protocol::Sutra, "one instance", Setup::standard()),
            (Protocol::Sutra, "two instances", Setup::two_instances()),
            (Protocol::OneTransaction, "one instance", Setup::standard()),
            (
                Protocol::OneTransaction,
                "two instances",
                Setup::two_instances(),
            ),
            (
                Protocol::OneTransaction,
                "two instances, administered",
                Setup::two_instances_administered(),
            ),
            (
                Protocol::OneTransaction,
                "poison pill",
                Setup::poison_pill(),
            ),
            (Protocol::OneTransaction, "call", Setup::call()),
            (Protocol::Sutra, "call, reported", Setup::call_reported()),
        ];
        let checked = checks.map(|(protocol, world, setup)| {
            let report = exhaustively(protocol, setup);
            println!(
                "{protocol:?}, {world}: {} states, depth {}, checked in {:.1?}",
                report.unique_states, report.max_depth, report.elapsed
            );
            Checked {
                protocol,
                world,
                report,
            }
        });
        checked.into()
    })
}

fn holds(property: &str) {
    for checked in reports() {
        if let Some(trace) = checked.report.failed(property) {
            let (protocol, world) = (checked.protocol, checked.world);
            panic!("{property} fails for {protocol:?} in the {world} world:\n{trace}");
        }
    }
}

#[test]
fn exclusion_holds() {
    holds(EXCLUSION);
}

#[test]
fn committed_implies_unowned_holds() {
    holds(COMMITTED_IMPLIES_UNOWNED);
}

#[test]
fn no_lost_commit_holds() {
    holds(NO_LOST_COMMIT);
}

#[test]
fn asked_is_taken_holds() {
    holds(ASKED_IS_TAKEN);
}

#[test]
fn claim_not_forever_holds() {
    holds(CLAIM_NOT_FOREVER);
}

#[test]
fn poisoned_holds() {
    holds(POISONED);
}

#[test]
fn end_reaches_parent_holds() {
    holds(END_REACHES_PARENT);
}
