//! `for-each`: one body per item of a list, at most `concurrency` at a time, results in item
//! order (BPMN's multi-instance activity; decision 0051).
//!
//! The looping token waits at the node in `TokenState::Looping`, holding the items, the results
//! so far and how many bodies it started. Each body is a token of its own (`Role::Body`) at the
//! same node, parked on an ordinary task park, so the store arms a fan-out as the tasks of one
//! step. A body starts `Ready` and the step's run loop parks it, so that a body whose input
//! fails to render fails the instance on itself, and restore or migration — which set a body
//! ready again — start it afresh for its own item. When a body ends, the next item's starts, in
//! item order; when the last has ended, the looping token goes on with the results. A loop's
//! `deadline` and `remind` are satellite timers beside the looping token (`exec/boundary.rs`).

use serde_json::{Value, json};

use super::answers::Answer;
use super::{Fate, Fault, Outcome, Run, call};
use crate::codes;
use crate::expr::json_type_name;
use crate::model::{Body, ForEachSpec, Node, NodeKind};
use crate::snapshot::{ParkId, ParkKind, Role, Token, TokenId, TokenState};
use crate::step::{HistoryKind, Rejection};

impl Run<'_> {
    /// Starts the loop: renders the list, and starts the first `concurrency` bodies.
    pub(super) fn for_each(
        &mut self,
        token: &mut Token,
        node: &Node,
        spec: &ForEachSpec,
    ) -> Outcome {
        let items = match spec.items.render(&self.bindings())? {
            Value::Array(items) => items,
            other => {
                return Err(Fault::new(
                    codes::FOR_EACH_NOT_A_LIST.code,
                    format!(
                        "the `items` of for-each `{}` gave {}, not a list",
                        node.id,
                        json_type_name(&other)
                    ),
                ));
            }
        };
        if items.len() > self.ctx.items_max as usize {
            return Err(Fault::new(
                codes::FOR_EACH_TOO_MANY_ITEMS.code,
                format!(
                    "the `items` of for-each `{}` gave {} items; a for-each loops over {} at most",
                    node.id,
                    items.len(),
                    self.ctx.items_max
                ),
            ));
        }
        let count = items.len();
        let detail = json!({"items": count, "concurrency": spec.concurrency});
        self.record_at(HistoryKind::LoopStarted, token, detail);
        if items.is_empty() {
            return self.end_loop(token, node, Vec::new());
        }
        token.state = TokenState::Looping {
            results: vec![Value::Null; count],
            items,
            next: 0,
            running: 0,
        };
        self.start_bodies(token, spec);
        self.arm_loop_timers(token, node);
        Ok(Fate::Stays)
    }

    /// Starts the next bodies, in item order, while fewer than `concurrency` run.
    fn start_bodies(&mut self, looping: &mut Token, spec: &ForEachSpec) {
        let TokenState::Looping {
            items,
            next,
            running,
            ..
        } = &mut looping.state
        else {
            return;
        };
        let concurrency = spec.concurrency.unwrap_or(u32::MAX);
        let mut started = Vec::new();
        while (*next as usize) < items.len() && *running < concurrency {
            started.push(*next);
            *next += 1;
            *running += 1;
        }
        for index in started {
            let body = Token {
                id: self.mint_token(),
                node: looping.node.clone(),
                parent: Some(looping.id),
                state: TokenState::Ready,
                role: Some(Role::Body { index }),
            };
            self.put_back(body);
        }
    }

    /// Runs the body for item `index`: parks it on its task, the input rendered with the item
    /// and its index in scope.
    pub(super) fn run_body(&mut self, body: &mut Token, node: &Node, index: u32) -> Outcome {
        let NodeKind::ForEach(spec) = &node.kind else {
            return Err(not_a_loop(node));
        };
        let item = body
            .parent
            .and_then(|parent| self.snap.token(parent))
            .and_then(|looping| match &looping.state {
                TokenState::Looping { items, .. } => items.get(index as usize).cloned(),
                _ => None,
            })
            .ok_or_else(|| not_a_loop(node))?;
        let position = json!(index);
        let bindings = self
            .bindings()
            .json(&spec.item, &item)
            .json("index", &position);
        let task = match &spec.body {
            Body::Task(task) => task,
            Body::Call(call) => {
                let input = call.input.render(&bindings)?;
                return self.call_body(body, &call.flow, input);
            }
        };
        let input = task.input.render(&bindings)?;
        let kind = ParkKind::Task {
            topic: task.topic.clone(),
            input,
            retries: task.retries,
            backoff: task.backoff,
            lock: task.lock,
            due: None,
        };
        self.park(body, kind);
        Ok(Fate::Stays)
    }

    /// The body for item `index` was answered: its result is kept in item order and the next
    /// body starts, or its error ends the loop at `on-error` (the other bodies withdrawn) or
    /// fails the instance on the body, to run it again after a restore.
    pub(super) fn body_answered(
        &mut self,
        mut body: Token,
        index: u32,
        park: ParkId,
        answer: Answer,
    ) -> Result<(), Rejection> {
        let looping = body.parent.and_then(|parent| {
            self.snap
                .tokens
                .iter()
                .position(|t| t.id == parent && matches!(t.state, TokenState::Looping { .. }))
        });
        let Some(looping) = looping else {
            return Err(Rejection::Stale(Some(park)));
        };
        let mut looping = self.snap.tokens.remove(looping);
        let outcome = match answer {
            Answer::Output(output) => {
                self.record_at(HistoryKind::TaskCompleted, &body, json!({"park": park}));
                self.body_done(&mut looping, index, output)
            }
            Answer::Error(error) => {
                self.record_task_failure(&body, park, &error, false);
                let fault = Fault::new(&error.code, error.message);
                self.body_failed(&mut looping, &mut body, index, fault)
            }
            Answer::Exhausted(error) => {
                self.record_task_failure(&body, park, &error, true);
                let fault = Fault::new(codes::TASK_RETRIES_EXHAUSTED.code, error.message);
                self.body_failed(&mut looping, &mut body, index, fault)
            }
            Answer::Child { child, outcome } => {
                self.record_child_end(&body, park, &child, &outcome);
                match call::child_error(&child, outcome) {
                    Ok(reply) => self.body_done(&mut looping, index, reply),
                    Err(fault) => self.body_failed(&mut looping, &mut body, index, fault),
                }
            }
            Answer::Message(_) | Answer::Timer => Err(Fault::new(
                codes::NODE_UNKNOWN.code,
                format!(
                    "the body for item {index} of `{}` waits for a task",
                    looping.node
                ),
            )),
        };
        self.settle(looping, outcome);
        Ok(())
    }

    fn body_done(&mut self, looping: &mut Token, index: u32, output: Value) -> Outcome {
        let node = self.node_named(&looping.node)?;
        let NodeKind::ForEach(spec) = &node.kind else {
            return Err(not_a_loop(node));
        };
        let TokenState::Looping {
            results,
            running,
            next,
            items,
        } = &mut looping.state
        else {
            return Err(not_a_loop(node));
        };
        if let Some(slot) = results.get_mut(index as usize) {
            *slot = output;
        }
        *running = running.saturating_sub(1);
        if *running == 0 && *next as usize >= items.len() {
            let results = std::mem::take(results);
            return self.end_loop(looping, node, results);
        }
        self.start_bodies(looping, spec);
        Ok(Fate::Stays)
    }

    /// A body's error: to the node's `on-error` with `vars.error = {code, message, index}`, the
    /// other bodies withdrawn; without one, the instance fails on the body itself, which keeps
    /// its place among the running ones for a restore to run again.
    fn body_failed(
        &mut self,
        looping: &mut Token,
        body: &mut Token,
        index: u32,
        fault: Fault,
    ) -> Outcome {
        let node = self.node_named(&looping.node)?;
        let Some(target) = node.on_error else {
            body.state = TokenState::Ready;
            let (id, at) = (body.id, body.node.clone());
            self.put_back(body.clone());
            self.fail(id, at, fault);
            return Ok(Fate::Stays);
        };
        self.withdraw_bodies(looping.id);
        self.resolve_satellites(looping.id);
        let failure = json!({"code": fault.code, "message": fault.detail, "index": index});
        self.put_var("error", failure);
        self.goto(looping, target)
    }

    /// Resolves every body of the loop: their tasks are withdrawn with their parks.
    pub(super) fn withdraw_bodies(&mut self, looping: TokenId) {
        let (bodies, others) =
            std::mem::take(&mut self.snap.tokens)
                .into_iter()
                .partition(|token: &Token| {
                    token.parent == Some(looping) && matches!(token.role, Some(Role::Body { .. }))
                });
        self.snap.tokens = others;
        for body in bodies {
            if let Some(park) = body.park() {
                self.release(park);
            }
        }
    }

    fn end_loop(&mut self, looping: &mut Token, node: &Node, results: Vec<Value>) -> Outcome {
        self.resolve_satellites(looping.id);
        let detail = json!({"items": results.len()});
        self.record_at(HistoryKind::LoopEnded, looping, detail);
        self.set_output(node, Value::Array(results))?;
        self.completed(looping, node);
        self.proceed(looping, node.after)
    }
}

/// A body whose loop or node is not what it should be: a snapshot that does not match its flow.
fn not_a_loop(node: &Node) -> Fault {
    Fault::new(
        codes::NODE_UNKNOWN.code,
        format!(
            "node `{}` holds a for-each body, and is no for-each looping",
            node.id
        ),
    )
}
