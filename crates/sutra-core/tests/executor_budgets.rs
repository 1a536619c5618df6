//! The executor under its budgets (issue 48, decision 0074): an expression that does too much
//! work and variables that grow too large fail the instance in place, at the node, with codes of
//! their own; what the node would have assigned is not assigned, and a restore runs it again.

mod support;

use serde_json::{Value, json};
use support::{ctx, flow, message, new_snapshot, set};
use sutra_core::snapshot::Status;
use sutra_core::step::{Event, Step, StepContext};

fn started(nodes: Vec<support::N>, input: Value, limits: StepContext) -> Step {
    let flow = flow(nodes);
    let start = Event::Start {
        message: message("m0", input),
    };
    sutra_core::exec::apply(&flow, &new_snapshot(), start, limits).unwrap()
}

fn failure(step: &Step) -> (&str, Option<&str>) {
    assert_eq!(step.snapshot.status, Status::Failed, "{:?}", step.snapshot);
    let failure = step.snapshot.failure.as_ref().unwrap();
    (failure.code.as_str(), failure.node.as_deref())
}

#[test]
fn a_set_growing_the_variables_past_their_bound_fails_there_and_assigns_nothing() {
    let limits = StepContext {
        vars_bytes_max: 10_000,
        ..ctx()
    };
    let step = started(
        vec![
            set("a", &[("a", json!("= vars.input.s + vars.input.s"))]),
            set(
                "b",
                &[("small", json!(1)), ("b", json!("= vars.a + vars.a"))],
            ),
        ],
        json!({"s": "x".repeat(1_500)}),
        limits,
    );
    assert_eq!(failure(&step), ("SUTRA.RUNTIME.VARS.TOO_LARGE", Some("b")));
    let vars = &step.snapshot.vars;
    assert_eq!(vars["a"].as_str().map(str::len), Some(3_000), "`a` fit");
    assert!(
        !vars.contains_key("b") && !vars.contains_key("small"),
        "{vars:?}"
    );
}

#[test]
fn an_expression_past_the_steps_budget_fails_the_instance_with_its_own_code() {
    let limits = StepContext {
        expression_cost_max: 100_000,
        ..ctx()
    };
    let step = started(
        vec![set(
            "x",
            &[("x", json!("= vars.input.l.map(a, vars.input.l)"))],
        )],
        json!({"l": vec![1; 2_000]}),
        limits,
    );
    assert_eq!(
        failure(&step),
        ("SUTRA.RUNTIME.EXPRESSION.BUDGET", Some("x"))
    );
    assert!(!step.snapshot.vars.contains_key("x"));
}

/// The budget is the step's: many cheap expressions add up, and the next step starts afresh.
#[test]
fn the_expressions_of_one_step_spend_one_budget() {
    let cheap = |id: &str| set(id, &[(id, json!("= vars.input.l.map(a, a + 1)"))]);
    let input = json!({"l": (0..1_000).collect::<Vec<_>>()});
    let one = started(vec![cheap("a")], input.clone(), ctx());
    assert_eq!(one.snapshot.status, Status::Completed);
    let limits = StepContext {
        expression_cost_max: 8_000,
        ..ctx()
    };
    let single = started(vec![cheap("a")], input.clone(), limits);
    assert_eq!(single.snapshot.status, Status::Completed, "one fits");
    let many = started(
        vec![cheap("a"), cheap("b"), cheap("c"), cheap("d")],
        input,
        limits,
    );
    assert_eq!(
        failure(&many),
        ("SUTRA.RUNTIME.EXPRESSION.BUDGET", Some("c"))
    );
}
