//! The cost of evaluating an expression, metered while it runs (decision 0074).
//!
//! CEL has no loops but its comprehensions, and the checker bounds how deep they nest; but two
//! nested over a 16 KB list are 256 million evaluations (a lane held for 32 s), and one
//! `l.map(a, l)` copies the list once per element (an 18 KB message ended the process in an
//! allocation failure). No bound at check time can see a list's length, so the work is counted
//! as it is done: when an expression is compiled its tree is rewritten so that every value it
//! produces passes through [`CHARGE`], a function that returns its argument and counts its
//! size against the meter of the evaluation in progress. Once the meter runs out the function
//! fails, the evaluation ends with an error, and the caller learns it was the budget.
//!
//! What is charged, one unit per value cell (a list's or map's element, 16 bytes of a string):
//! - every value a call produces (`l + l` costs what it copies), and every list or map literal
//!   and comprehension (they copy their elements);
//! - the arguments of every call but those whose work does not grow with them (`l[0]`,
//!   `size(l)`, the logical operators): `l == m` walks both;
//! - every iteration of a comprehension, through its body, so that a loop whose body produces
//!   nothing new (`l.exists(b, false)`) still costs a unit per element;
//! - the expression's result (`= vars.big` copies what it reads).
//!
//! A unit costs 0.3–0.7 µs of a release build's core (measured by `budget_tests` with
//! `--release --nocapture`: a two-level comprehension spends 300,000 units in 80–200 ms); the
//! default budget of a step, a million, is half a second at most.
//!
//! The rewrite keeps the shapes the evaluator recognises to run a comprehension fast (a `map`'s
//! step `@result + [e]`, an `exists`'s `@result || e`): it charges inside them, never around.

use std::cell::Cell;

use cel::common::ast::{
    CallExpr, ComprehensionExpr, EntryExpr, Expr as Ast, IdedEntryExpr, IdedExpr, ListExpr,
    MapExpr, operators,
};
use cel::common::types::{CelBytes, CelList, CelMap, CelMapKey, CelOptional, CelString};
use cel::common::value::{CowVal, Val};
use cel::{Env, ExecutionError};

/// The function every metered value passes through. `@` cannot begin a name in CEL's source, so
/// no expression can call it or shadow it.
const CHARGE: &str = "@charge";
/// Whether the evaluation may go on: `false` once the meter has run out. A loop that folds its
/// body's errors away (`exists`, `all`: a later `true` or `false` may still decide) asks it
/// before each iteration, so that the iterations after the budget is spent do not run.
const WITHIN_BUDGET: &str = "@within_budget";
/// Bytes of a string or byte string that cost one unit.
const BYTES_PER_UNIT: usize = 16;
/// Calls that look at a part of their argument, whatever its size: their arguments are not
/// charged (nor are those of [`PASSING_CALLS`]).
const PART_CALLS: &[&str] = &[operators::INDEX, operators::OPT_INDEX, "size"];
/// Calls that produce no value of their own, only one of their arguments' or a boolean: neither
/// their arguments nor their results are charged (and `&&`, `||` and `?:` keep the shapes the
/// evaluator looks for).
const PASSING_CALLS: &[&str] = &[
    operators::LOGICAL_AND,
    operators::LOGICAL_OR,
    operators::LOGICAL_NOT,
    operators::CONDITIONAL,
    operators::NOT_STRICTLY_FALSE,
];

thread_local! {
    /// The units the evaluation running on this thread may still spend, and whether it ran out.
    static METER: Cell<(u64, bool)> = const { Cell::new((0, false)) };
}

/// Adds [`CHARGE`] to the environment expressions are evaluated in.
pub(super) fn declare(env: &mut Env) {
    env.add_overload(
        CHARGE,
        "charge_dyn",
        vec![cel::common::types::DYN_TYPE],
        charge,
    )
    .expect("`@charge` is declared once, in an environment that cannot name it");
    env.add_overload(WITHIN_BUDGET, "within_budget", vec![], within_budget)
        .expect("`@within_budget` is declared once, in an environment that cannot name it");
}

/// Runs `evaluate` with `units` to spend. Returns what it returned, the units left, and whether
/// the meter ran out (then its result, an error or a value computed past the error, is void).
pub(super) fn metered<T>(units: u64, evaluate: impl FnOnce() -> T) -> (T, u64, bool) {
    let outer = METER.replace((units, false));
    let result = evaluate();
    let (left, exhausted) = METER.replace(outer);
    (result, left, exhausted)
}

fn charge<'b, 'v>(mut args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = args
        .pop()
        .ok_or_else(|| ExecutionError::invalid_argument_count(1, 0))?;
    let (left, _) = METER.get();
    match units_within(value.as_ref(), left) {
        Some(units) => {
            METER.set((left - units, false));
            Ok(value)
        }
        None => {
            METER.set((0, true));
            Err(ExecutionError::function_error(
                CHARGE,
                "the expression's budget is spent",
            ))
        }
    }
}

fn within_budget<'b, 'v>(_: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let (_, exhausted) = METER.get();
    Ok(CowVal::owned(cel::common::types::CelBool::from(!exhausted)))
}

/// What `value` costs, if at most `limit`: one unit for itself and one per cell inside it,
/// counted without recursion and without looking further once past the limit.
fn units_within(value: &dyn Val, limit: u64) -> Option<u64> {
    let mut units = 0u64;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        units += 1;
        if let Some(list) = value.downcast_ref::<CelList>() {
            pending.extend(list.inner().iter().map(|item| &**item));
        } else if let Some(map) = value.downcast_ref::<CelMap>() {
            for (key, item) in map.inner() {
                if let CelMapKey::String(key) = key {
                    units += text_units(key.inner().len());
                }
                pending.push(&**item);
            }
        } else if let Some(text) = value.downcast_ref::<CelString>() {
            units += text_units(text.inner().len());
        } else if let Some(bytes) = value.downcast_ref::<CelBytes>() {
            units += text_units(bytes.inner().len());
        } else if let Some(inner) = value.downcast_ref::<CelOptional>().and_then(|o| o.inner()) {
            pending.push(inner);
        }
        if units > limit {
            return None;
        }
    }
    Some(units)
}

fn text_units(bytes: usize) -> u64 {
    (bytes / BYTES_PER_UNIT) as u64
}

/// The tree `root` with every value it produces charged: see the module's account.
pub(super) fn meter(root: &IdedExpr) -> IdedExpr {
    charged(metered_tree(root))
}

/// `node` metered: a comprehension and a list or map literal copy what they hold, and are
/// charged for it; a selection or a name reads in place.
fn metered_tree(node: &IdedExpr) -> IdedExpr {
    let copied = |expr| charged(IdedExpr { id: node.id, expr });
    let expr = match &node.expr {
        Ast::Call(call) => return metered_call(node.id, call),
        Ast::Comprehension(c) => return copied(Ast::Comprehension(Box::new(metered_loop(c)))),
        Ast::List(list) => {
            return copied(Ast::List(ListExpr {
                elements: list.elements.iter().map(metered_tree).collect(),
                optional_indices: list.optional_indices.clone(),
            }));
        }
        Ast::Map(map) => {
            return copied(Ast::Map(MapExpr {
                entries: map.entries.iter().map(metered_entry).collect(),
            }));
        }
        Ast::Select(select) => {
            let mut select = select.clone();
            *select.operand = metered_tree(&select.operand);
            Ast::Select(select)
        }
        Ast::Struct(s) => {
            let mut s = s.clone();
            s.entries = s.entries.iter().map(metered_entry).collect();
            Ast::Struct(s)
        }
        Ast::Unspecified | Ast::Ident(_) | Ast::Literal(_) => node.expr.clone(),
    };
    IdedExpr { id: node.id, expr }
}

fn metered_entry(entry: &IdedEntryExpr) -> IdedEntryExpr {
    let expr = match &entry.expr {
        EntryExpr::StructField(field) => {
            let mut field = field.clone();
            field.value = metered_tree(&field.value);
            EntryExpr::StructField(field)
        }
        EntryExpr::MapEntry(map_entry) => {
            let mut map_entry = map_entry.clone();
            map_entry.key = metered_tree(&map_entry.key);
            map_entry.value = metered_tree(&map_entry.value);
            EntryExpr::MapEntry(map_entry)
        }
    };
    IdedEntryExpr { id: entry.id, expr }
}

fn metered_call(id: u64, call: &CallExpr) -> IdedExpr {
    let name = call.func_name.as_str();
    let passing = PASSING_CALLS.contains(&name);
    let flat = passing || PART_CALLS.contains(&name);
    let argument = |arg: &IdedExpr| {
        let arg = metered_tree(arg);
        if flat || matches!(arg.expr, Ast::Literal(_)) {
            arg
        } else {
            charged(arg)
        }
    };
    let call = Ast::Call(CallExpr {
        func_name: call.func_name.clone(),
        target: call.target.as_deref().map(|t| Box::new(argument(t))),
        args: call.args.iter().map(argument).collect(),
    });
    let node = IdedExpr { id, expr: call };
    if passing { node } else { charged(node) }
}

/// A comprehension whose every iteration is charged. Its accumulator's start, loop condition and
/// result are the macro's own (no user expression in them) and stay as they are.
fn metered_loop(c: &ComprehensionExpr) -> ComprehensionExpr {
    ComprehensionExpr {
        iter_range: metered_tree(&c.iter_range),
        loop_cond: checked_condition(&c.loop_cond),
        loop_step: metered_step(&c.loop_step, &c.accu_var),
        ..c.clone()
    }
}

/// A loop's condition that also ends the loop once the budget is spent: `exists` and `all` hold
/// their body's error back in case a later element decides, and without it would run every
/// remaining iteration past the budget. A constant condition (`map`, `filter`: an error ends them
/// at once) stays constant, the shape the evaluator runs fast.
fn checked_condition(condition: &IdedExpr) -> IdedExpr {
    if matches!(condition.expr, Ast::Literal(_)) {
        return condition.clone();
    }
    let within = IdedExpr {
        id: condition.id,
        expr: Ast::Call(CallExpr {
            func_name: WITHIN_BUDGET.to_owned(),
            target: None,
            args: vec![],
        }),
    };
    IdedExpr {
        id: condition.id,
        expr: Ast::Call(CallExpr {
            func_name: operators::LOGICAL_AND.to_owned(),
            target: None,
            args: vec![within, condition.clone()],
        }),
    }
}

/// A loop step with the user's expressions in it charged, its shape kept: `@result + [e]`
/// (`map`, `filter`), `g ? step : @result` (a guarded step, `exists_one`), `@result || e`
/// (`exists`), `@result && e` (`all`). Any other step is charged whole.
fn metered_step(step: &IdedExpr, accu: &str) -> IdedExpr {
    let is_accu = |e: &IdedExpr| matches!(&e.expr, Ast::Ident(name) if name == accu);
    let Ast::Call(call) = &step.expr else {
        return charged(metered_tree(step));
    };
    let args = match (call.func_name.as_str(), call.args.as_slice()) {
        (
            operators::ADD,
            [
                head,
                IdedExpr {
                    id,
                    expr: Ast::List(items),
                },
            ],
        ) if is_accu(head) => {
            let items = ListExpr {
                elements: items
                    .elements
                    .iter()
                    .map(|e| charged(metered_tree(e)))
                    .collect(),
                optional_indices: items.optional_indices.clone(),
            };
            let items = IdedExpr {
                id: *id,
                expr: Ast::List(items),
            };
            vec![head.clone(), items]
        }
        (operators::CONDITIONAL, [guard, then, otherwise]) if is_accu(otherwise) => vec![
            charged(metered_tree(guard)),
            metered_step(then, accu),
            otherwise.clone(),
        ],
        (operators::LOGICAL_OR | operators::LOGICAL_AND, [head, body]) if is_accu(head) => {
            vec![head.clone(), charged(metered_tree(body))]
        }
        (
            operators::ADD,
            [
                head,
                IdedExpr {
                    expr: Ast::Literal(_),
                    ..
                },
            ],
        ) if is_accu(head) => {
            // `exists_one`'s count: a unit per match is already charged by its guard.
            return step.clone();
        }
        _ => return charged(metered_tree(step)),
    };
    IdedExpr {
        id: step.id,
        expr: Ast::Call(CallExpr {
            func_name: call.func_name.clone(),
            target: None,
            args,
        }),
    }
}

/// `node` passed through [`CHARGE`], unless it already is.
fn charged(node: IdedExpr) -> IdedExpr {
    if matches!(&node.expr, Ast::Call(call) if call.func_name == CHARGE) {
        return node;
    }
    IdedExpr {
        id: node.id,
        expr: Ast::Call(CallExpr {
            func_name: CHARGE.to_owned(),
            target: None,
            args: vec![node],
        }),
    }
}

/// Whether `value` as JSON takes at most `limit` bytes, counted without building it and without
/// looking further once past the limit: a result may hold one list many times over (`l.map(a,
/// l)`), which JSON would write out in full.
pub(super) fn json_bytes_within(value: &cel::Value, limit: usize) -> bool {
    let mut bytes = 0usize;
    let mut pending = vec![value];
    while let Some(value) = pending.pop() {
        bytes += match value {
            cel::Value::List(items) => {
                pending.extend(items.iter());
                2 + items.len()
            }
            cel::Value::Map(map) => {
                pending.extend(map.map.values());
                2 + map
                    .map
                    .keys()
                    .map(|k| k.to_string().len() + 4)
                    .sum::<usize>()
            }
            cel::Value::String(text) => text.len() + 2,
            cel::Value::Bytes(bytes) => bytes.len() * 4 / 3 + 4,
            _ => 24,
        };
        if bytes > limit {
            return false;
        }
    }
    true
}
