//! The protocol as the engine implements it keeps every property in every reachable state of
//! both worlds (`Setup::standard`, `Setup::two_instances`). One exhaustive check per world is
//! shared by the tests, which each read their own property's verdict.

use std::sync::OnceLock;

use sutra_model::{
    ASKED_IS_TAKEN, CLAIM_NOT_FOREVER, COMMITTED_IMPLIES_UNOWNED, EXCLUSION, NO_LOST_COMMIT,
    Protocol, Report, Setup, exhaustively,
};

fn reports() -> &'static [(&'static str, Report)] {
    static REPORTS: OnceLock<Vec<(&str, Report)>> = OnceLock::new();
    REPORTS.get_or_init(|| {
        let worlds = [
            ("one instance", Setup::standard()),
            ("two instances", Setup::two_instances()),
        ];
        let checked = worlds.map(|(world, setup)| (world, exhaustively(Protocol::Sutra, setup)));
        for (world, report) in &checked {
            println!(
                "{world}: {} states, depth {}, checked in {:.1?}",
                report.unique_states, report.max_depth, report.elapsed
            );
        }
        checked.into()
    })
}

fn holds(property: &str) {
    for (world, report) in reports() {
        if let Some(trace) = report.failed(property) {
            panic!("{property} fails in the {world} world:\n{trace}");
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
