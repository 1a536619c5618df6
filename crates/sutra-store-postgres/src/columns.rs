//! A step's history and tasks as columns, one array per column, for the statements that write
//! them with `unnest`: a step's own rows ([`crate::commit`]) and a group's settles
//! ([`crate::settles`]).

use serde_json::Value;
use sqlx::types::Json;
use sutra_core::step::HistoryEvent;
use sutra_store::Result;
use sutra_store_sql::TaskArm;

use crate::codec::{duration_micros, history_kind, micros, park, signed};
use crate::statements::Query;

/// The array types of [`HistoryColumns`], in their order.
pub(crate) const HISTORY_TYPES: [&str; 6] = ["bigint", "bigint", "text", "text", "bigint", "jsonb"];

/// The array types of [`TaskColumns`], in their order.
pub(crate) const TASK_TYPES: [&str; 11] = [
    "text", "bigint", "text", "jsonb", "bigint", "bigint", "bigint", "text", "text", "bigint",
    "bigint",
];

/// `unnest`'s arguments for columns of `types` bound from parameter `$first` on: each
/// parameter cast to an array of its type.
pub(crate) fn unnest_args(first: usize, types: &[&str]) -> String {
    let args: Vec<String> = (first..)
        .zip(types)
        .map(|(n, ty)| format!("${n}::{ty}[]"))
        .collect();
    args.join(", ")
}

/// A step's history as six arrays: sequence, time, kind, node, token, detail.
#[derive(Default)]
pub(crate) struct HistoryColumns<'a> {
    seqs: Vec<i64>,
    ats: Vec<i64>,
    kinds: Vec<String>,
    nodes: Vec<Option<&'a str>>,
    tokens: Vec<Option<i64>>,
    details: Vec<Json<&'a Value>>,
}

impl<'a> HistoryColumns<'a> {
    pub(crate) fn of(events: &'a [HistoryEvent]) -> Result<HistoryColumns<'a>> {
        let mut columns = HistoryColumns::default();
        for event in events {
            columns.push(event)?;
        }
        Ok(columns)
    }

    pub(crate) fn push(&mut self, event: &'a HistoryEvent) -> Result<()> {
        self.seqs.push(signed(event.seq, "a history sequence")?);
        self.ats.push(micros(event.at));
        self.kinds.push(history_kind(event.kind));
        self.nodes.push(event.node.as_deref());
        let token = event.token.map(|token| signed(token.0, "a token id"));
        self.tokens.push(token.transpose()?);
        self.details.push(Json(&event.detail));
        Ok(())
    }

    pub(crate) fn bind(self, query: Query<'a>) -> Query<'a> {
        query
            .bind(self.seqs)
            .bind(self.ats)
            .bind(self.kinds)
            .bind(self.nodes)
            .bind(self.tokens)
            .bind(self.details)
    }
}

/// A step's armed tasks as eleven arrays: id, park, topic, input, retries, backoff, lock, and
/// for a task a worker took ([`sutra_store_sql::TakenTask`]; `NULL` for the others) its worker, lock token, lock
/// length and the expiry its worker was told. The row's expiry is the later of that and the
/// length from the database's own now: never earlier than the worker was told, nor shorter than
/// asked by the database's clock.
#[derive(Default)]
pub(crate) struct TaskColumns<'a> {
    ids: Vec<&'a str>,
    parks: Vec<i64>,
    topics: Vec<&'a str>,
    inputs: Vec<Json<&'a Value>>,
    retries: Vec<i64>,
    backoffs: Vec<i64>,
    locks: Vec<i64>,
    workers: Vec<Option<&'a str>>,
    tokens: Vec<Option<&'a str>>,
    taken_locks: Vec<Option<i64>>,
    expiries: Vec<Option<i64>>,
}

impl<'a> TaskColumns<'a> {
    pub(crate) fn of(tasks: &'a [TaskArm<'a>]) -> Result<TaskColumns<'a>> {
        let mut columns = TaskColumns::default();
        for task in tasks {
            columns.push(task)?;
        }
        Ok(columns)
    }

    pub(crate) fn push(&mut self, task: &'a TaskArm<'a>) -> Result<()> {
        self.ids.push(&task.id);
        self.parks.push(park(task.park)?);
        self.topics.push(task.topic);
        self.inputs.push(Json(task.input));
        self.retries.push(i64::from(task.retries));
        self.backoffs.push(duration_micros(task.backoff));
        self.locks.push(duration_micros(task.lock));
        let taken = task.taken.as_ref();
        self.workers.push(taken.map(|taken| taken.worker));
        self.tokens
            .push(taken.map(|taken| taken.lock_token.as_str()));
        self.taken_locks
            .push(taken.map(|taken| duration_micros(taken.lock)));
        self.expiries
            .push(taken.map(|taken| micros(taken.expires_at)));
        Ok(())
    }

    pub(crate) fn bind(self, query: Query<'a>) -> Query<'a> {
        query
            .bind(self.ids)
            .bind(self.parks)
            .bind(self.topics)
            .bind(self.inputs)
            .bind(self.retries)
            .bind(self.backoffs)
            .bind(self.locks)
            .bind(self.workers)
            .bind(self.tokens)
            .bind(self.taken_locks)
            .bind(self.expiries)
    }
}
