//! Running the checker the two ways the tests need: exhaustively, for the protocol that must keep
//! every property, and until one named property fails, for a regression that must be caught.
//! Both report what a reviewer needs: the state count, the time, and counterexamples narrated.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use stateright::{Checker, HasDiscoveries, Model};

use crate::model::ProtocolModel;
use crate::setup::{Protocol, Setup};
use crate::trace::narrate;

/// Deeper than any counterexample needs: where a broken variant is not caught, the search ends
/// here instead of running on (some variants livelock, growing the fence without bound).
const DEPTH_GUARD: usize = 48;

#[derive(Debug)]
pub struct Report {
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Each failed property with its counterexample, narrated.
    pub failures: Vec<(&'static str, String)>,
}

impl Report {
    pub fn failed(&self, property: &str) -> Option<&str> {
        let found = self.failures.iter().find(|(name, _)| *name == property);
        found.map(|(_, trace)| trace.as_str())
    }
}

/// Explores every reachable state (breadth-first, on both cores).
pub fn exhaustively(protocol: Protocol, setup: Setup) -> Report {
    run(ProtocolModel::new(protocol, setup), |checker| {
        checker.threads(2)
    })
}

/// Explores breadth-first on one thread until `property` fails, one depth more each round
/// (iterative deepening), so that the counterexample is a shortest one: within one round
/// stateright keeps the last violation it met rather than the first, and bounding the depth makes
/// every violation it can meet equally short. The report counts the states of the last round.
pub fn until_failure(protocol: Protocol, setup: Setup, property: &'static str) -> Report {
    let model = ProtocolModel::new(protocol, setup);
    let started = Instant::now();
    let mut depth = 1;
    loop {
        depth += 1;
        let report = run(model.clone(), |checker| {
            checker
                .threads(1)
                .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
                .target_max_depth(depth)
        });
        if report.failed(property).is_some() || depth == DEPTH_GUARD {
            let elapsed = started.elapsed();
            return Report { elapsed, ..report };
        }
    }
}

fn run(
    model: ProtocolModel,
    configure: impl FnOnce(
        stateright::CheckerBuilder<ProtocolModel>,
    ) -> stateright::CheckerBuilder<ProtocolModel>,
) -> Report {
    let started = Instant::now();
    let checker = configure(model.clone().checker()).spawn_bfs().join();
    let elapsed = started.elapsed();
    let mut failures: Vec<_> = (checker.discoveries().into_iter())
        .map(|(name, path)| (name, narrate(&model, &path)))
        .collect();
    failures.sort();
    Report {
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        failures,
    }
}
