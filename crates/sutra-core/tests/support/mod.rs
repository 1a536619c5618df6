//! Test support for the executor: a compact flow builder and a simulator that drives one
//! instance through `exec::apply`.
//!
//! Flows are built here rather than parsed from YAML so that the executor's tests do not depend
//! on the checker. The builder lays nodes out exactly as the checker's model promises: one arena,
//! ids unique flow-wide, `after` resolved to `next`, else the following node of the same list,
//! else the end of the list.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::collections::HashMap;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use sutra_core::exec::apply;
use sutra_core::expr::{Expr, INSTANCE_ROOTS, Leaf, Template, classify_leaf};
use sutra_core::model::*;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot, Status};
use sutra_core::step::{Event, Message, Rejection, Step, StepContext, TaskError};

/// A node as a test writes it: references are ids, resolved when the flow is built.
#[derive(Debug, Clone)]
pub struct N {
    id: String,
    kind: K,
    output: Option<String>,
    on_error: Option<String>,
    next: Option<String>,
}

#[derive(Debug, Clone)]
enum K {
    Set(Vec<(String, Value)>),
    Task(String, Value),
    Emit(String, Value, Option<String>),
    Receive(String, String, Option<(SignedDuration, Option<String>)>),
    WaitFor(SignedDuration),
    WaitUntil(String),
    Choice(Vec<(String, String)>, Option<String>),
    Parallel(Vec<Vec<N>>),
    Scope(Vec<N>),
    End(Option<Value>),
    Fail(String, Option<Value>),
}

fn node(id: &str, kind: K) -> N {
    N {
        id: id.into(),
        kind,
        output: None,
        on_error: None,
        next: None,
    }
}

/// `set`: each value is a template (`"= expr"` strings are expressions).
pub fn set(id: &str, vars: &[(&str, Value)]) -> N {
    let vars = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    node(id, K::Set(vars))
}

pub fn task(id: &str, topic: &str, input: Value) -> N {
    node(id, K::Task(topic.into(), input))
}

pub fn emit(id: &str, channel: &str, data: Value) -> N {
    node(id, K::Emit(channel.into(), data, None))
}

pub fn receive(id: &str, channel: &str, key: &str) -> N {
    node(id, K::Receive(channel.into(), key.into(), None))
}

pub fn wait_for(id: &str, seconds: i64) -> N {
    node(id, K::WaitFor(SignedDuration::from_secs(seconds)))
}

pub fn wait_until(id: &str, expr: &str) -> N {
    node(id, K::WaitUntil(expr.into()))
}

/// `choice`: `(when, next)` arms in order, then an optional `otherwise`.
pub fn choice(id: &str, arms: &[(&str, &str)], otherwise: Option<&str>) -> N {
    let arms = arms
        .iter()
        .map(|(w, n)| (w.to_string(), n.to_string()))
        .collect();
    node(id, K::Choice(arms, otherwise.map(Into::into)))
}

pub fn parallel(id: &str, branches: Vec<Vec<N>>) -> N {
    node(id, K::Parallel(branches))
}

/// `scope`: a block whose failures go to the node's `on-error`.
pub fn scope(id: &str, block: Vec<N>) -> N {
    node(id, K::Scope(block))
}

pub fn end(id: &str, reply: Option<Value>) -> N {
    node(id, K::End(reply))
}

pub fn fail(id: &str, code: &str, detail: Option<Value>) -> N {
    node(id, K::Fail(code.into(), detail))
}

impl N {
    pub fn next(mut self, id: &str) -> N {
        self.next = Some(id.into());
        self
    }

    pub fn output(mut self, var: &str) -> N {
        self.output = Some(var.into());
        self
    }

    pub fn on_error(mut self, id: &str) -> N {
        self.on_error = Some(id.into());
        self
    }

    /// A `receive`'s timeout and `on-timeout`.
    pub fn timeout(mut self, seconds: i64, on_timeout: Option<&str>) -> N {
        if let K::Receive(_, _, limit) = &mut self.kind {
            *limit = Some((
                SignedDuration::from_secs(seconds),
                on_timeout.map(Into::into),
            ));
        }
        self
    }

    /// An `emit`'s key expression.
    pub fn key(mut self, expr: &str) -> N {
        if let K::Emit(_, _, key) = &mut self.kind {
            *key = Some(expr.into());
        }
        self
    }
}

/// Builds flow `f`, started on channel `in`, from its top-level list.
pub fn flow(nodes: Vec<N>) -> Flow {
    let mut order = Vec::new();
    number(&nodes, &mut order);
    let index: HashMap<String, NodeIndex> = order
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), NodeIndex(i as u32)))
        .collect();
    let mut arena = Vec::new();
    lay_out(&nodes, &index, &mut arena);
    let start = Start::Channel("in".into());
    let entry = nodes.first().map(|n| index[&n.id]);
    Flow::new("f".into(), Some(start), arena, entry)
}

/// Node ids in arena order: each node, then its branches' nodes (pre-order).
fn number(list: &[N], order: &mut Vec<String>) {
    for n in list {
        order.push(n.id.clone());
        match &n.kind {
            K::Parallel(branches) => branches.iter().for_each(|b| number(b, order)),
            K::Scope(block) => number(block, order),
            _ => {}
        }
    }
}

fn lay_out(list: &[N], index: &HashMap<String, NodeIndex>, arena: &mut Vec<Node>) {
    let at = |id: &String| index[id];
    for (i, n) in list.iter().enumerate() {
        let after = match (&n.next, list.get(i + 1)) {
            (Some(next), _) => After::Node(at(next)),
            (None, Some(following)) => After::Node(at(&following.id)),
            (None, None) => After::End,
        };
        let kind = match &n.kind {
            K::Set(vars) => {
                NodeKind::Set(vars.iter().map(|(k, v)| (k.clone(), template(v))).collect())
            }
            K::Task(topic, input) => NodeKind::Task(TaskSpec {
                topic: topic.clone(),
                input: template(input),
                retries: TASK_RETRIES_DEFAULT,
                backoff: TASK_BACKOFF_DEFAULT,
                lock: TASK_LOCK_DEFAULT,
            }),
            K::Emit(channel, data, key) => NodeKind::Emit(EmitSpec {
                channel: channel.clone(),
                data: template(data),
                key: key.as_deref().map(expr),
            }),
            K::Receive(channel, key, limit) => NodeKind::Receive(ReceiveSpec {
                channel: channel.clone(),
                key: expr(key),
                timeout: limit.as_ref().map(|(d, _)| *d),
                on_timeout: limit.as_ref().and_then(|(_, t)| t.as_ref().map(at)),
            }),
            K::WaitFor(d) => NodeKind::Wait(WaitSpec::Duration(*d)),
            K::WaitUntil(source) => NodeKind::Wait(WaitSpec::Until(expr(source))),
            K::Choice(arms, otherwise) => NodeKind::Choice(ChoiceSpec {
                arms: arms
                    .iter()
                    .map(|(when, next)| ChoiceArm {
                        when: expr(when),
                        next: at(next),
                    })
                    .collect(),
                otherwise: otherwise.as_ref().map(at),
            }),
            K::Parallel(branches) => NodeKind::Parallel(
                branches
                    .iter()
                    .map(|b| b.first().map(|n| at(&n.id)))
                    .collect(),
            ),
            K::Scope(block) => NodeKind::Scope(block.first().map(|n| at(&n.id))),
            K::End(reply) => NodeKind::End {
                reply: reply.as_ref().map(template),
            },
            K::Fail(code, detail) => NodeKind::Fail {
                code: code.clone(),
                detail: detail.as_ref().map(template),
            },
        };
        arena.push(Node {
            id: n.id.clone(),
            kind,
            output: n.output.clone(),
            on_error: n.on_error.as_ref().map(at),
            after,
            deadline: None,
            remind: None,
            compensate_with: None,
        });
        match &n.kind {
            K::Parallel(branches) => branches.iter().for_each(|b| lay_out(b, index, arena)),
            K::Scope(block) => lay_out(block, index, arena),
            _ => {}
        }
    }
}

pub fn expr(source: &str) -> Expr {
    Expr::compile(source, INSTANCE_ROOTS).unwrap_or_else(|e| panic!("{source}: {e}"))
}

/// A template from JSON, reading `"= expr"` string leaves as expressions.
pub fn template(value: &Value) -> Template {
    match value {
        Value::String(text) => match classify_leaf(text) {
            Leaf::Expression(source) => Template::Expr(expr(source)),
            Leaf::Literal(text) => Template::Literal(Value::String(text)),
        },
        Value::Array(items) => Template::List(items.iter().map(template).collect()),
        Value::Object(map) => {
            Template::Map(map.iter().map(|(k, v)| (k.clone(), template(v))).collect())
        }
        other => Template::Literal(other.clone()),
    }
}

/// The flows of a deployment document the checker accepts without an error.
pub fn checked_flows(yaml: &str) -> std::collections::BTreeMap<String, Flow> {
    let checked = sutra_core::check::check(yaml);
    let errors = (checked.diagnostics.iter())
        .filter(|d| d.severity == sutra_core::diagnostic::Severity::Error);
    assert_eq!(errors.count(), 0, "{:#?}", checked.diagnostics);
    checked.deployment.expect("the flows check").flows
}

pub fn now() -> Timestamp {
    "2026-01-01T00:00:00Z".parse().unwrap()
}

pub fn ctx() -> StepContext {
    StepContext::at(now())
}

pub fn message(id: &str, data: Value) -> Message {
    Message {
        id: id.into(),
        kind: "test".into(),
        source: "tests".into(),
        subject: None,
        time: None,
        data,
    }
}

pub fn new_snapshot() -> Snapshot {
    Snapshot::new(InstanceInfo {
        id: "i1".into(),
        tenant: "default".into(),
        deployment: "d".into(),
        version: 1,
        flow: "f".into(),
        parent: None,
    })
}

pub fn task_error(code: &str, message: &str) -> TaskError {
    TaskError {
        code: code.into(),
        message: message.into(),
    }
}

/// One instance driven through the executor; every accepted step becomes its new snapshot.
pub struct Sim {
    pub flow: Flow,
    pub snapshot: Snapshot,
    pub ctx: StepContext,
}

impl Sim {
    pub fn new(nodes: Vec<N>) -> Sim {
        Sim {
            flow: flow(nodes),
            snapshot: new_snapshot(),
            ctx: ctx(),
        }
    }

    /// A new instance of `flow`, read by the checker from the deployment document `yaml`.
    pub fn checked(yaml: &str, flow: &str) -> Sim {
        Sim {
            flow: checked_flows(yaml)[flow].clone(),
            snapshot: new_snapshot(),
            ctx: ctx(),
        }
    }

    pub fn apply(&mut self, event: Event) -> Result<Step, Rejection> {
        let step = apply(&self.flow, &self.snapshot, event, self.ctx)?;
        self.snapshot = step.snapshot.clone();
        Ok(step)
    }

    /// Applies an event that must be accepted.
    pub fn ok(&mut self, event: Event) -> Step {
        self.apply(event.clone())
            .unwrap_or_else(|r| panic!("{event:?} was rejected: {r}"))
    }

    pub fn start(&mut self, input: Value) -> Step {
        self.ok(Event::Start {
            message: message("m0", input),
        })
    }

    /// The park of the token at `node`.
    pub fn park(&self, node: &str) -> ParkId {
        self.snapshot
            .tokens
            .iter()
            .find(|t| t.node == node)
            .and_then(|t| t.park())
            .unwrap_or_else(|| panic!("no token is parked at `{node}`: {:?}", self.snapshot.tokens))
            .id
    }

    pub fn status(&self) -> Status {
        self.snapshot.status
    }

    pub fn var(&self, name: &str) -> Value {
        self.snapshot.vars.get(name).cloned().unwrap_or(json!(null))
    }

    /// The nodes the instance's tokens are at, in token order.
    pub fn at(&self) -> Vec<&str> {
        self.snapshot
            .tokens
            .iter()
            .map(|t| t.node.as_str())
            .collect()
    }
}
