//! A CEL expression, as a deployment's guards, keys, templates and `correlate` write it:
//! compiled, then evaluated over variables the fuzzer chooses, as the executor binds an
//! instance's names (`vars`, `instance`, `msg`, `now`) and intake a message's attributes
//! (`data`, `id`, `type`, `source`, `subject`, `time`).
//!
//! The input: the expression on the first line, then JSON for the variables. An expression that
//! uses a message's names is evaluated as a channel's `correlate`: each name bound to that
//! field of the JSON. Any other: `vars` is the JSON (an object; empty otherwise), `instance` its
//! `instance` field and `msg` its `msg` field.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value, json};
use sutra_core::expr::{Bindings, CompileError, Expr, INSTANCE_ROOTS, MESSAGE_ROOTS};

fuzz_target!(
    init: sutra_fuzz::tolerate_caught_panics(),
    |data: &[u8]| {
        let (source, variables) = sutra_fuzz::split(data, b'\n');
        let Ok(source) = std::str::from_utf8(source) else {
            return;
        };
        let variables: Value = serde_json::from_slice(variables).unwrap_or(Value::Null);
        match Expr::compile(source, INSTANCE_ROOTS) {
            Ok(expr) => over_an_instance(&expr, &variables),
            Err(CompileError::UnknownName { .. }) => {
                if let Ok(expr) = Expr::compile(source, MESSAGE_ROOTS) {
                    over_a_message(&expr, &variables);
                }
            }
            Err(error) => {
                let _ = (error.to_string(), error.syntax_detail());
            }
        }
    }
);

fn over_an_instance(expr: &Expr, variables: &Value) {
    let vars = match variables {
        Value::Object(vars) => vars.clone(),
        _ => Map::new(),
    };
    let instance = variables.get("instance").cloned().unwrap_or_else(
        || json!({"id": "0190c0de-0000-7000-8000-000000000001", "flow": "main", "version": 1}),
    );
    let now: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().expect("a timestamp");
    let bindings = Bindings::new()
        .object("vars", &vars)
        .json("instance", &instance)
        .timestamp("now", now);
    let bindings = match variables.get("msg") {
        Some(msg) => bindings.json("msg", msg),
        None => bindings,
    };
    evaluate(expr, &bindings);
}

fn over_a_message(expr: &Expr, attributes: &Value) {
    let bindings = MESSAGE_ROOTS
        .iter()
        .fold(Bindings::new(), |bindings, name| {
            bindings.json(name, &attributes[*name])
        });
    evaluate(expr, &bindings);
}

fn evaluate(expr: &Expr, bindings: &Bindings) {
    if let Ok(value) = expr.eval(bindings) {
        assert!(!sutra_core::storable::holds_nul(&value));
    }
    if let Ok(key) = expr.eval_key(bindings) {
        assert!(key.len() <= sutra_core::expr::KEY_BYTES_MAX);
    }
}
