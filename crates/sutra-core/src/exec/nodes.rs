//! What each node kind does when a token reaches it: the executor's handlers, one arm per
//! [`NodeKind`]. The step driver in the parent module picks the token and settles what the
//! handler made of it; a handler only moves its own token on, parks it, forks it, or fails.

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

use super::{Fate, Fault, Outcome, Run};
use crate::codes;
use crate::expr::{EvalError, Expr, Template};
use crate::model::{ChoiceSpec, EmitSpec, NodeIndex, NodeKind, WaitSpec};
use crate::snapshot::{ParkKind, Role, Token, TokenState};
use crate::step::{Effect, HistoryKind};

impl Run<'_> {
    /// Runs the token's node, or completes its join when its last branch has ended.
    pub(super) fn advance(&mut self, token: &mut Token) -> Outcome {
        let node = self.node_named(&token.node)?;
        if matches!(token.state, TokenState::Joining { .. }) {
            // A scope's deadline goes with its block.
            self.resolve_satellites(token.id);
            self.record_at(HistoryKind::Joined, token, json!({}));
            return self.proceed(token, node.after);
        }
        // A loop's bodies are one visit of their node, however many items it has.
        if let Some(Role::Body { index }) = token.role {
            return self.run_body(token, node, index);
        }
        self.count_visit()?;
        match &node.kind {
            NodeKind::Set(assignments) => {
                self.assign(token, assignments)?;
                self.completed(token, node);
                self.proceed(token, node.after)
            }
            NodeKind::Task(spec) => {
                let input = spec.input.render(&self.bindings())?;
                let kind = ParkKind::Task {
                    topic: spec.topic.clone(),
                    input,
                    retries: spec.retries,
                    backoff: spec.backoff,
                    lock: spec.lock,
                    due: node.deadline.as_ref().map(|d| self.due_in(d.after)),
                };
                self.park_waiting(token, node, kind);
                Ok(Fate::Stays)
            }
            NodeKind::Emit(spec) => {
                self.emit(token, spec)?;
                self.completed(token, node);
                self.proceed(token, node.after)
            }
            NodeKind::Receive(spec) => {
                // The checker allows a `timeout` or a `deadline`, not both: either is the
                // park's one timer.
                let timeout = spec.timeout.or(node.deadline.as_ref().map(|d| d.after));
                let kind = ParkKind::Receive {
                    channel: spec.channel.clone(),
                    key: spec.key.eval_key(&self.bindings())?,
                    due: timeout.map(|timeout| self.due_in(timeout)),
                };
                self.park_waiting(token, node, kind);
                Ok(Fate::Stays)
            }
            NodeKind::Wait(spec) => {
                let due = self.wait_due(spec)?;
                self.park(token, ParkKind::Wait { due });
                Ok(Fate::Stays)
            }
            NodeKind::Choice(spec) => {
                let target = self.choose(token, spec)?;
                self.goto(token, target)
            }
            NodeKind::Parallel(branches) => self.fork(token, branches),
            NodeKind::Race(arms) => self.race(token, arms),
            NodeKind::ForEach(spec) => self.for_each(token, node, spec),
            NodeKind::Call(spec) => self.call(token, node, spec),
            NodeKind::Scope(head) => self.scope(token, node, *head),
            NodeKind::Compensate { scope } => self.compensate(token, scope.as_deref()),
            NodeKind::End { reply } => {
                let reply = match reply {
                    Some(template) => template.render(&self.bindings())?,
                    None => Value::Null,
                };
                self.complete(reply);
                Ok(Fate::Ends)
            }
            NodeKind::Fail { code, detail } => Err(Fault::new(
                code,
                self.fail_detail(&node.id, detail.as_ref())?,
            )),
        }
    }

    fn count_visit(&mut self) -> Result<(), Fault> {
        self.visits += 1;
        if self.visits <= self.ctx.transitions_max {
            return Ok(());
        }
        Err(Fault::new(
            codes::STEP_BUDGET_EXCEEDED.code,
            format!(
                "the step visited more than {} nodes without parking: \
                 does a loop never reach a task, receive or wait?",
                self.ctx.transitions_max
            ),
        ))
    }

    /// Forks one token per non-empty branch; the forking token waits for them. With no branch to
    /// run, it is joinable at once.
    pub(super) fn fork(&mut self, token: &mut Token, branches: &[Option<NodeIndex>]) -> Outcome {
        let firsts = branches
            .iter()
            .flatten()
            .map(|&first| Ok(self.node_at(first)?.id.clone()))
            .collect::<Result<Vec<String>, Fault>>()?;
        let mut forked = Vec::with_capacity(firsts.len());
        for node in firsts {
            let id = self.mint_token();
            forked.push(id);
            self.put_back(Token {
                id,
                node,
                parent: Some(token.id),
                state: TokenState::Ready,
                role: None,
            });
        }
        token.state = TokenState::Joining {
            pending: u32::try_from(forked.len()).unwrap_or(u32::MAX),
        };
        self.record_at(HistoryKind::Forked, token, json!({"tokens": forked}));
        Ok(Fate::Stays)
    }

    /// Assigns a `set` node's variables in order, each template seeing the ones before it. A
    /// failing template assigns nothing, so the node can run again as a whole after a restore.
    fn assign(&mut self, token: &Token, assignments: &[(String, Template)]) -> Result<(), Fault> {
        // What each assignment replaced, to put back if a later one fails: the variables are
        // changed in place, not copied, so that a node costs what it assigns.
        let mut replaced = Vec::with_capacity(assignments.len());
        for (name, template) in assignments {
            let rendered = template.render(&self.bindings());
            let assigned = rendered.map_err(Fault::from).and_then(|value| {
                replaced.push((name, self.put_var(name, value)));
                self.vars_within_bound()
            });
            if let Err(fault) = assigned {
                for (name, before) in replaced.into_iter().rev() {
                    match before {
                        Some(value) => self.put_var(name, value),
                        None => {
                            self.remove_var(name);
                            None
                        }
                    };
                }
                return Err(fault);
            }
        }
        let names: Vec<&str> = assignments.iter().map(|(name, _)| name.as_str()).collect();
        self.record_at(HistoryKind::VariablesSet, token, json!({"names": names}));
        Ok(())
    }

    /// Writes an outbox row. Its idempotency key carries the seq of the `emitted` history event,
    /// which is unique within the instance and the same on every retry of the send.
    fn emit(&mut self, token: &Token, spec: &EmitSpec) -> Result<(), Fault> {
        let bindings = self.bindings();
        let data = spec.data.render(&bindings)?;
        let key = spec
            .key
            .as_ref()
            .map(|key| key.eval_key(&bindings))
            .transpose()?;
        let seq = self.record_at(
            HistoryKind::Emitted,
            token,
            json!({"channel": spec.channel}),
        );
        self.effects.push(Effect::Emit {
            channel: spec.channel.clone(),
            data,
            key,
            idempotency_key: format!("{}:{seq}:{}", self.snap.instance.id, token.node),
        });
        Ok(())
    }

    /// When a `wait` is due. A time already past still parks the token, due at that time: the
    /// store fires it at once, in a step of its own, so a `wait` never continues within the step
    /// that reached it and the history shows the deadline the flow asked for.
    pub(super) fn wait_due(&self, spec: &WaitSpec) -> Result<Timestamp, Fault> {
        match spec {
            WaitSpec::Duration(duration) => Ok(self.due_in(*duration)),
            WaitSpec::Until(expr) => Ok(parse_until(expr, &expr.eval(&self.bindings())?)?),
        }
    }

    /// `now + duration`; a deadline beyond the representable range is "never" in practice.
    pub(super) fn due_in(&self, duration: SignedDuration) -> Timestamp {
        self.ctx
            .now
            .saturating_add(duration)
            .unwrap_or(Timestamp::MAX)
    }

    fn choose(&mut self, token: &Token, spec: &ChoiceSpec) -> Result<NodeIndex, Fault> {
        let bindings = self.bindings();
        for arm in &spec.arms {
            if arm.when.eval_bool(&bindings)? {
                self.record_choice(token, json!(arm.when.source()), arm.next);
                return Ok(arm.next);
            }
        }
        let Some(otherwise) = spec.otherwise else {
            return Err(Fault::new(
                codes::CHOICE_NO_MATCH.code,
                format!(
                    "no `when` of choice `{}` was true, and it has no `otherwise`",
                    token.node
                ),
            ));
        };
        self.record_choice(token, Value::Null, otherwise);
        Ok(otherwise)
    }

    /// Records the arm a choice took; `when` is the guard's source, or null for `otherwise`.
    fn record_choice(&mut self, token: &Token, when: Value, next: NodeIndex) {
        let next = self.node_at(next).ok().map(|n| n.id.as_str());
        self.record_at(
            HistoryKind::ChoiceTaken,
            token,
            json!({"when": when, "next": next}),
        );
    }

    fn fail_detail(&self, node: &str, detail: Option<&Template>) -> Result<String, Fault> {
        let rendered = detail.map(|t| t.render(&self.bindings())).transpose()?;
        Ok(match rendered {
            Some(Value::String(text)) => text,
            Some(other) => other.to_string(),
            None => format!("the flow reached fail node `{node}`"),
        })
    }
}

/// Reads a `wait.until` result: a CEL timestamp (which evaluation renders as RFC 3339) or an
/// RFC 3339 string.
fn parse_until(expr: &Expr, value: &Value) -> Result<Timestamp, EvalError> {
    let message = match value {
        Value::String(text) => match text.parse() {
            Ok(at) => return Ok(at),
            Err(e) => format!("`until` must be an RFC 3339 time: {e}"),
        },
        other => format!(
            "`until` must be a timestamp or an RFC 3339 string, got {}",
            crate::expr::json_type_name(other)
        ),
    };
    Err(EvalError::failed(expr.source(), message))
}
