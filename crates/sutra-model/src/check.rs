//! Running the checker the two ways the tests need: exhaustively, for the protocol that must keep
//! every property, and until one named property fails, for a regression that must be caught.
//! Both report what a reviewer needs: the state count, the time, and counterexamples narrated.
//! The claim protocol's model and the lease model are run the same way.

use std::collections::BTreeSet;
use std::hash::Hash;
use std::time::{Duration, Instant};

use stateright::{Checker, CheckerBuilder, Expectation, HasDiscoveries, Model, Path};

use crate::lease::{LeaseModel, LeaseProtocol, LeaseSetup};
use crate::lease_trace;
use crate::model::ProtocolModel;
use crate::setup::{Protocol, Setup};
use crate::trace;

/// Deeper than any counterexample needs: where a broken variant is not caught, the search ends
/// here instead of running on (some variants livelock, growing the fence without bound).
const DEPTH_GUARD: usize = 48;

#[derive(Debug)]
pub struct Report {
    pub unique_states: usize,
    pub max_depth: usize,
    pub elapsed: Duration,
    /// Each failed property with its counterexample, narrated; a `sometimes` property fails
    /// when no example of it was met.
    pub failures: Vec<(&'static str, String)>,
    /// Each `sometimes` property met, with its example, narrated.
    pub examples: Vec<(&'static str, String)>,
}

impl Report {
    pub fn failed(&self, property: &str) -> Option<&str> {
        let found = self.failures.iter().find(|(name, _)| *name == property);
        found.map(|(_, trace)| trace.as_str())
    }

    pub fn example(&self, property: &str) -> Option<&str> {
        let found = self.examples.iter().find(|(name, _)| *name == property);
        found.map(|(_, trace)| trace.as_str())
    }
}

/// How a model's paths are told.
type Narrate<M> = fn(&M, &Path<<M as Model>::State, <M as Model>::Action>) -> String;

/// Explores every reachable state of the claim protocol (breadth-first, on both cores).
pub fn exhaustively(protocol: Protocol, setup: Setup) -> Report {
    let model = ProtocolModel::new(protocol, setup);
    run(model, trace::narrate, |checker| checker.threads(2))
}

/// Explores the claim protocol until `property` fails (see `deepen`).
pub fn until_failure(protocol: Protocol, setup: Setup, property: &'static str) -> Report {
    deepen(
        ProtocolModel::new(protocol, setup),
        trace::narrate,
        property,
    )
}

/// Explores every reachable state of the lease model (breadth-first, on both cores).
pub fn leases_exhaustively(protocol: LeaseProtocol, setup: LeaseSetup) -> Report {
    let model = LeaseModel::new(protocol, setup);
    run(model, lease_trace::narrate, |checker| checker.threads(2))
}

/// Explores the lease model until `property` fails (see `deepen`).
pub fn leases_until_failure(
    protocol: LeaseProtocol,
    setup: LeaseSetup,
    property: &'static str,
) -> Report {
    let model = LeaseModel::new(protocol, setup);
    deepen(model, lease_trace::narrate, property)
}

/// Explores breadth-first on one thread until `property` fails, one depth more each round
/// (iterative deepening), so that the counterexample is a shortest one: within one round
/// stateright keeps the last violation it met rather than the first, and bounding the depth makes
/// every violation it can meet equally short. The report counts the states of the last round.
fn deepen<M>(model: M, narrate: Narrate<M>, property: &'static str) -> Report
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let mut depth = 1;
    loop {
        depth += 1;
        let report = run(model.clone(), narrate, |checker| {
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

fn run<M>(
    model: M,
    narrate: Narrate<M>,
    configure: impl FnOnce(CheckerBuilder<M>) -> CheckerBuilder<M>,
) -> Report
where
    M: Model + Clone + Send + Sync + 'static,
    M::State: Hash + Send + Sync + Clone + PartialEq + 'static,
    M::Action: Clone + PartialEq,
{
    let started = Instant::now();
    let checker = configure(model.clone().checker()).spawn_bfs().join();
    let elapsed = started.elapsed();
    let mut discoveries = checker.discoveries();
    let (mut failures, mut examples) = (Vec::new(), Vec::new());
    for property in model.properties() {
        let found = discoveries.remove(property.name);
        let told = found.map(|path| (property.name, narrate(&model, &path)));
        match (property.expectation, told) {
            (Expectation::Sometimes, Some(example)) => examples.push(example),
            (Expectation::Sometimes, None) => {
                failures.push((property.name, "no example was met".to_owned()));
            }
            (_, Some(counterexample)) => failures.push(counterexample),
            (_, None) => {}
        }
    }
    failures.sort();
    examples.sort();
    Report {
        unique_states: checker.unique_state_count(),
        max_depth: checker.max_depth(),
        elapsed,
        failures,
        examples,
    }
}
