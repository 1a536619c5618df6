//! What an expression reads of the names bound for it, so that an evaluation converts only that.

use std::collections::BTreeMap;
use std::sync::Arc;

use cel::common::ast::Expr as Ast;
use serde_json::{Map, Value};

use super::children;

/// What an expression reads of a bound value: the whole of it, or some of its fields, each read
/// in turn as a whole or in part — `vars.order.total + vars.fee` reads `order.total` and `fee`
/// of `vars`. Found from the expression's tree when it is compiled (a chain of field selections
/// from a free name is a path; any other use of the name reads all of it), so that an evaluation
/// converts only that: every expression of a step sees the instance's whole variables, and
/// converting them all for each made a step's cost grow with the square of its size (a sequence
/// of 9,000 `set` nodes took 19 s, issue 18). A field read that is missing stays missing, so
/// `has()` and "no such key" answer as over the whole value.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Reads {
    Whole,
    Fields(BTreeMap<String, Reads>),
}

impl Reads {
    /// Adds the read of `path` below this one.
    fn add(&mut self, path: &[&str]) {
        let Reads::Fields(fields) = self else {
            return;
        };
        match path.split_first() {
            None => *self = Reads::Whole,
            Some((field, rest)) => fields
                .entry((*field).to_owned())
                .or_insert_with(|| Reads::Fields(BTreeMap::new()))
                .add(rest),
        }
    }

    pub(super) fn of(&self, value: &Value) -> cel::Value {
        match (self, value) {
            (Reads::Fields(_), Value::Object(object)) => self.of_object(object),
            _ => json_to_cel(value),
        }
    }

    pub(super) fn of_object(&self, object: &Map<String, Value>) -> cel::Value {
        let Reads::Fields(fields) = self else {
            return object_to_cel(object.iter());
        };
        let read = fields
            .iter()
            .filter_map(|(field, reads)| object.get_key_value(field).map(|(k, v)| (k, reads, v)));
        let entries = read
            .map(|(k, reads, v)| (cel::objects::Key::String(Arc::new(k.clone())), reads.of(v)))
            .collect();
        cel::Value::Map(cel::objects::Map {
            map: Arc::new(entries),
        })
    }
}

/// Records in `reads` what `expr` reads of each free name: each identifier not bound by an
/// enclosing comprehension (`all`, `exists`, `map`, `filter`; those in `bound`). Only called on
/// trees whose depth has been bounded.
pub(super) fn find_reads(expr: &Ast, bound: &mut Vec<String>, reads: &mut BTreeMap<String, Reads>) {
    match expr {
        Ast::Ident(name) if !bound.contains(name) => {
            reads.insert(name.clone(), Reads::Whole);
        }
        Ast::Select(_) => {
            let mut path = Vec::new();
            let mut base = expr;
            while let Ast::Select(select) = base {
                path.push(select.field.as_str());
                base = &select.operand.expr;
            }
            match base {
                Ast::Ident(name) if !bound.contains(name) => {
                    path.reverse();
                    reads
                        .entry(name.clone())
                        .or_insert_with(|| Reads::Fields(BTreeMap::new()))
                        .add(&path);
                }
                other => find_reads(other, bound, reads),
            }
        }
        Ast::Comprehension(c) => {
            find_reads(&c.iter_range.expr, bound, reads);
            find_reads(&c.accu_init.expr, bound, reads);
            let scope = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            for inner in [&c.loop_cond, &c.loop_step, &c.result] {
                find_reads(&inner.expr, bound, reads);
            }
            bound.truncate(scope);
        }
        other => children(other)
            .into_iter()
            .for_each(|child| find_reads(child, bound, reads)),
    }
}

fn json_to_cel(value: &Value) -> cel::Value {
    match value {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(items) => cel::Value::List(Arc::new(items.iter().map(json_to_cel).collect())),
        Value::Object(map) => object_to_cel(map.iter()),
    }
}

fn object_to_cel<'v>(entries: impl Iterator<Item = (&'v String, &'v Value)>) -> cel::Value {
    let entries = entries
        .map(|(k, v)| {
            (
                cel::objects::Key::String(Arc::new(k.clone())),
                json_to_cel(v),
            )
        })
        .collect();
    cel::Value::Map(cel::objects::Map {
        map: Arc::new(entries),
    })
}
