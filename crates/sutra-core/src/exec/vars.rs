//! The instance's variables, what expressions see of them, and the budgets they are held to.
//!
//! The variables are kept within `sutra.instance.max-vars-bytes` (decision 0074): they
//! are in every snapshot the instance writes and every expression's reach, and a bound on each
//! expression's result alone would let a loop of `set`s grow them without end. Their size is
//! measured at a step's first check (a step that assigns nothing measures nothing) and kept
//! current as each variable is written after it, so that a check costs what the node wrote, not
//! what the instance holds.

use serde_json::{Map, Value};

use super::{Fault, Run};
use crate::codes;
use crate::expr::Bindings;
use crate::storable::json_bytes;

impl Run<'_> {
    /// The names an expression over the instance sees, spending the step's budget.
    pub(super) fn bindings(&self) -> Bindings<'_> {
        let bindings = Bindings::new()
            .metered(&self.spend, self.ctx.expression_value_bytes_max)
            .object("vars", &self.snap.vars)
            .json("instance", &self.instance)
            .timestamp("now", self.ctx.now);
        match &self.msg {
            Some(msg) => bindings.json("msg", msg),
            None => bindings,
        }
    }

    /// Sets variable `name`, keeping the variables' size current. Returns the value it replaced.
    pub(super) fn put_var(&mut self, name: &str, value: Value) -> Option<Value> {
        let Some(size) = self.vars_bytes else {
            return self.snap.vars.insert(name.to_owned(), value);
        };
        let added = entry_bytes(name, &value);
        let replaced = self.snap.vars.insert(name.to_owned(), value);
        let removed = replaced.as_ref().map_or(0, |old| entry_bytes(name, old));
        self.vars_bytes = Some((size + added).saturating_sub(removed));
        replaced
    }

    /// Removes variable `name`, keeping the variables' size current.
    pub(super) fn remove_var(&mut self, name: &str) {
        let removed = self.snap.vars.remove(name);
        if let (Some(size), Some(old)) = (self.vars_bytes, removed) {
            self.vars_bytes = Some(size.saturating_sub(entry_bytes(name, &old)));
        }
    }

    /// Sets variable `name` where a node's answer goes, failing the node if the variables grow
    /// past their bound.
    pub(super) fn put_answer(&mut self, name: &str, value: Value) -> Result<(), Fault> {
        self.put_var(name, value);
        self.vars_within_bound()
    }

    /// Fails the node that grew the variables past `sutra.instance.max-vars-bytes`.
    pub(super) fn vars_within_bound(&mut self) -> Result<(), Fault> {
        let size = *self
            .vars_bytes
            .get_or_insert_with(|| vars_bytes(&self.snap.vars));
        if size <= self.ctx.vars_bytes_max {
            return Ok(());
        }
        Err(Fault::new(
            codes::VARS_TOO_LARGE.code,
            format!(
                "the instance's variables would take about {} bytes of JSON; \
                 `sutra.instance.max-vars-bytes` allows {}",
                size, self.ctx.vars_bytes_max
            ),
        ))
    }
}

/// The variables' size in bytes of JSON: each entry's key and value, with their punctuation.
fn vars_bytes(vars: &Map<String, Value>) -> usize {
    2 + vars
        .iter()
        .map(|(name, value)| entry_bytes(name, value))
        .sum::<usize>()
}

fn entry_bytes(name: &str, value: &Value) -> usize {
    name.len() + 4 + json_bytes(value)
}
