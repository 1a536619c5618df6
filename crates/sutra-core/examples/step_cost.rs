//! What one step costs the executor as it grows: a start that runs a sequence of `n` `set`
//! nodes (each adding a variable, so the variables grow with the step), and a two-node loop
//! that runs until the transition budget stops it. Prints the time of `exec::apply` alone —
//! no store, no I/O — for each size, so that a cost per node visit that grows with the step
//! shows as a time that grows faster than `n` (issue 18).
//!
//!     cargo run --release -p sutra-core --example step_cost

use std::time::Instant;

use jiff::Timestamp;
use serde_json::json;
use sutra_core::check::check;
use sutra_core::exec::apply;
use sutra_core::snapshot::{InstanceInfo, Snapshot};
use sutra_core::step::{Event, Message, StepContext};

fn main() {
    println!("| step | node visits | apply time | per visit |");
    println!("|---|---|---|---|");
    for n in [1_000, 3_000, 9_000] {
        measure(&format!("{n} `set` nodes in sequence"), &sequence(n), n);
    }
    let visits = StepContext::at(Timestamp::UNIX_EPOCH).transitions_max as usize;
    measure("a two-node loop to the budget", LOOP, visits);
}

/// A flow of `n` `set` nodes, the i-th setting `v{i}` from the one before it, then an end.
fn sequence(n: usize) -> String {
    let mut source = String::from(
        "name: cost\nchannels:\n  start: { transport: http }\nflows:\n  cost:\n    start: { channel: start }\n    nodes:\n      - id: n0\n        set: { v0: 0 }\n",
    );
    for i in 1..n {
        source.push_str(&format!(
            "      - id: n{i}\n        set: {{ v{i}: \"= vars.v{} + 1\" }}\n",
            i - 1
        ));
    }
    source.push_str("      - id: done\n        end: {}\n");
    source
}

/// A loop that never parks: it runs until the step's transition budget fails it.
const LOOP: &str = "name: cost\nchannels:\n  start: { transport: http }\nflows:\n  cost:\n    start: { channel: start }\n    nodes:\n      - id: zero\n        set: { x: 0 }\n      - id: count\n        set: { x: \"= vars.x + 1\" }\n        next: count\n";

fn measure(what: &str, source: &str, visits: usize) {
    let checked = check(source);
    let deployment = checked.deployment.unwrap_or_else(|| {
        panic!("the measured flow is valid: {:?}", checked.diagnostics);
    });
    let flow = &deployment.flows["cost"];
    let snapshot = Snapshot::new(InstanceInfo {
        id: "i-1".into(),
        tenant: "default".into(),
        deployment: "cost".into(),
        version: 1,
        flow: "cost".into(),
        parent: None,
    });
    let message = Message {
        id: "m-1".into(),
        kind: "cost.start".into(),
        source: "step_cost".into(),
        subject: None,
        time: None,
        data: json!({}),
    };
    let ctx = StepContext::at(Timestamp::UNIX_EPOCH);
    let started = Instant::now();
    let step = apply(flow, &snapshot, Event::Start { message }, ctx);
    let took = started.elapsed();
    assert!(step.is_ok(), "the start step runs: {step:?}");
    println!(
        "| {what} | {visits} | {:.1} ms | {:.2} µs |",
        took.as_secs_f64() * 1e3,
        took.as_secs_f64() * 1e6 / visits as f64
    );
}
