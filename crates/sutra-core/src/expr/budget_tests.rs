//! The budget on expressions (decision 0074): the probes of issue 48 end in a coded error, and
//! ordinary expressions answer as they did, at a cost that follows their work.

use std::cell::Cell;

use serde_json::{Value, json};

use super::*;

fn eval_within(source: &str, vars: &Value, units: u64) -> (Result<Value, EvalError>, u64) {
    let spend = Cell::new(units);
    let expr = Expr::compile(source, INSTANCE_ROOTS).unwrap();
    let bindings = Bindings::new()
        .metered(&spend, EXPRESSION_VALUE_BYTES_DEFAULT)
        .json("vars", vars);
    let outcome = expr.eval(&bindings);
    (outcome, units - spend.get())
}

fn over_budget(outcome: Result<Value, EvalError>) -> bool {
    matches!(
        outcome,
        Err(EvalError {
            fault: EvalFault::OverBudget,
            ..
        })
    )
}

/// Finding 1: an 18 KB message of one-digit numbers made `l.map(a, l)` n² values and ended the
/// process. It now spends its budget and stops.
#[test]
fn a_map_that_copies_its_list_per_element_spends_its_budget_and_stops() {
    let l = json!({"l": vec![1; 9_000]});
    let (outcome, spent) = eval_within("vars.l.map(a, vars.l)", &l, EXPRESSION_COST_DEFAULT);
    assert!(over_budget(outcome));
    assert_eq!(spent, EXPRESSION_COST_DEFAULT, "it spent all there was");
}

/// Finding 2: two comprehensions over a 16 KB list held a lane for 32 s. They stop at the
/// budget, whatever their body produces (a small one here, for a test's time: the default is
/// reached the same way, in about a second of a release build's core).
#[test]
fn a_two_level_comprehension_over_a_long_list_spends_its_budget_and_stops() {
    let l = json!({"l": (0..8_000).collect::<Vec<_>>()});
    let budget = 300_000;
    for source in [
        "vars.l.exists(a, vars.l.exists(b, a == b + 100000))",
        "vars.l.all(a, vars.l.all(b, true))",
        "vars.l.exists(a, vars.l.exists(b, false))",
        "vars.l.map(a, vars.l.filter(b, b < 0)).size() == 0",
        "vars.l.exists_one(a, vars.l.exists_one(b, b == -1))",
    ] {
        let started = std::time::Instant::now();
        let (outcome, spent) = eval_within(source, &l, budget);
        assert!(over_budget(outcome), "{source}");
        assert_eq!(spent, budget, "{source}");
        eprintln!("{source}: stopped after {:?}", started.elapsed());
    }
}

/// The result is bounded apart from the work: a value written out is bounded by the bytes its
/// JSON would take, not by what it cost to build (a list held many times over is cheap in CEL).
#[test]
fn a_result_larger_than_the_value_bound_is_refused_before_it_is_written_out() {
    let l = json!({"l": vec!["x".repeat(100); 100]});
    let spend = Cell::new(EXPRESSION_COST_DEFAULT);
    let expr = Expr::compile("vars.l + vars.l", INSTANCE_ROOTS).unwrap();
    let small = Bindings::new().metered(&spend, 10_000).json("vars", &l);
    let refused = expr.eval(&small).unwrap_err();
    assert_eq!(refused.fault, EvalFault::OverBudget);
    assert!(refused.message.contains("max-value-bytes"), "{refused}");
    let enough = Bindings::new().metered(&spend, 100_000).json("vars", &l);
    assert_eq!(expr.eval(&enough).unwrap().as_array().unwrap().len(), 200);
}

/// What a step's expressions spend is one purse: the units left pass from one evaluation to the
/// next, and an evaluation outside a step (a correlation key, a schedule's input) has a purse of
/// its own.
#[test]
fn the_expressions_of_a_step_share_its_budget() {
    let l = json!({"l": (0..1_000).collect::<Vec<_>>()});
    let (outcome, spent) = eval_within("vars.l.map(a, a * 2)", &l, 1_000_000);
    assert_eq!(outcome.unwrap().as_array().unwrap().len(), 1_000);
    assert!(
        (3_000..20_000).contains(&spent),
        "a unit or few per element: {spent}"
    );
    let (outcome, _) = eval_within("vars.l.map(a, a * 2)", &l, spent - 1);
    assert!(over_budget(outcome), "one unit short is over");
    let unmetered = Expr::compile("vars.l.map(a, a * 2)", INSTANCE_ROOTS).unwrap();
    assert!(unmetered.eval(&Bindings::new().json("vars", &l)).is_ok());
}

/// Charging changes no answer: errors, short circuits, `has`, optional fields and the evaluator's
/// fast paths for `map` and `filter` answer as CEL does.
#[test]
fn a_metered_expression_answers_as_cel_does() {
    let vars = json!({"n": 3, "s": "abc", "l": [1, 2, 3], "m": {"k": "v"}});
    let cases = [
        ("vars.n > 2 && vars.s.startsWith('a')", json!(true)),
        ("vars.l.map(x, x * vars.n)", json!([3, 6, 9])),
        ("vars.l.filter(x, x > 1)", json!([2, 3])),
        ("vars.l.map(x, x > 1, x)", json!([2, 3])),
        ("vars.l.exists_one(x, x == 2)", json!(true)),
        (
            "vars.l.all(x, x > 0) && !vars.l.exists(x, x > 5)",
            json!(true),
        ),
        ("[1, 0].exists(x, 1 / x == 1)", json!(true)),
        ("false && vars.missing.x", json!(false)),
        (
            "has(vars.m.k) ? {'k': vars.m.k + '!'} : {}",
            json!({"k": "v!"}),
        ),
        ("vars.l[1] + size(vars.s)", json!(5)),
        ("2 in vars.l", json!(true)),
        ("vars.l.map(x, [x, vars.m]).size()", json!(3)),
    ];
    for (source, expected) in cases {
        let (outcome, _) = eval_within(source, &vars, EXPRESSION_COST_DEFAULT);
        assert_eq!(outcome.unwrap(), expected, "{source}");
    }
    let (failed, _) = eval_within("vars.l.map(x, 1 / (x - 2))", &vars, 1_000);
    let failed = failed.unwrap_err();
    assert_eq!(failed.fault, EvalFault::Failed, "{failed}");
}
