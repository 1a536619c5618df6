//! What a park's answer does to the token parked on it: a message, a timer, a task's result or
//! its error moves the token on, to its node's `next`, its `on-error`, its `on-timeout` or its
//! deadline's `next`.

use jiff::SignedDuration;
use serde_json::{Value, json};

use super::{Fault, Outcome, Run};
use crate::codes;
use crate::model::{Node, NodeKind};
use crate::snapshot::{ParkId, ParkKind, Token};
use crate::step::{ChildOutcome, HistoryKind, Message, TaskError};

/// An event that answers a park.
pub(super) enum Answer {
    Message(Message),
    Timer,
    Output(Value),
    Error(TaskError),
    Exhausted(TaskError),
    /// The called instance `child` ended.
    Child {
        child: String,
        outcome: ChildOutcome,
    },
}

impl Answer {
    /// Whether this answer is one a park of `kind` waits for. A timer answers a park with a due
    /// time: a `wait`, or a `receive` with a timeout, whose message and timer rows are one park,
    /// consumed by whichever comes first.
    pub(super) fn answers(&self, kind: &ParkKind) -> bool {
        match (self, kind) {
            (Answer::Message(_), ParkKind::Receive { .. }) => true,
            (Answer::Timer, kind) => kind.due().is_some(),
            (
                Answer::Output(_) | Answer::Error(_) | Answer::Exhausted(_),
                ParkKind::Task { .. },
            ) => true,
            (Answer::Child { child, .. }, ParkKind::Call { child: waited, .. }) => child == waited,
            _ => false,
        }
    }
}

impl Run<'_> {
    pub(super) fn answer(&mut self, token: &mut Token, park: ParkId, answer: Answer) -> Outcome {
        let node = self.node_named(&token.node)?;
        match answer {
            Answer::Message(message) => {
                self.record_at(
                    HistoryKind::MessageReceived,
                    token,
                    json!({"park": park, "message": message.id}),
                );
                self.set_output(node, message.data.clone())?;
                self.msg = Some(message.to_json());
                self.proceed(token, node.after)
            }
            Answer::Timer if node.deadline.is_some() => self.deadline_fired(token, park),
            Answer::Timer => {
                self.record_at(HistoryKind::TimerFired, token, json!({"park": park}));
                match &node.kind {
                    NodeKind::Receive(spec) => match spec.on_timeout {
                        Some(target) => self.goto(token, target),
                        None => {
                            let message = receive_timeout_message(&spec.channel, spec.timeout);
                            self.route_error(token, node, codes::RECEIVE_TIMEOUT.code, message)
                        }
                    },
                    _ => self.proceed(token, node.after),
                }
            }
            Answer::Output(output) => {
                self.record_at(HistoryKind::TaskCompleted, token, json!({"park": park}));
                self.set_output(node, output)?;
                self.completed(token, node);
                self.proceed(token, node.after)
            }
            Answer::Error(error) => {
                self.record_task_failure(token, park, &error, false);
                self.route_error(token, node, &error.code, error.message)
            }
            Answer::Exhausted(error) => {
                self.record_task_failure(token, park, &error, true);
                let code = codes::TASK_RETRIES_EXHAUSTED.code;
                self.route_error(token, node, code, error.message)
            }
            Answer::Child { child, outcome } => self.child_ended(token, node, park, child, outcome),
        }
    }

    pub(super) fn record_task_failure(
        &mut self,
        token: &Token,
        park: ParkId,
        error: &TaskError,
        exhausted: bool,
    ) {
        let detail = json!({
            "park": park,
            "code": error.code,
            "message": error.message,
            "exhausted": exhausted,
        });
        self.record_at(HistoryKind::TaskFailed, token, detail);
    }

    /// Sends a task's or a receive's error to the node's `on-error` with `vars.error` set, or
    /// fails the instance with it when there is no `on-error`.
    pub(super) fn route_error(
        &mut self,
        token: &mut Token,
        node: &Node,
        code: &str,
        message: String,
    ) -> Outcome {
        let Some(target) = node.on_error else {
            return Err(Fault::new(code, message));
        };
        let error = json!({"code": code, "message": message});
        self.put_var("error", error);
        self.goto(token, target)
    }

    pub(super) fn set_output(&mut self, node: &Node, value: Value) -> Result<(), Fault> {
        match &node.output {
            Some(name) => self.put_answer(name, value),
            None => Ok(()),
        }
    }
}

/// Why a receive timed out. Its node may have lost its `timeout` since it parked (a migration).
fn receive_timeout_message(channel: &str, timeout: Option<SignedDuration>) -> String {
    match timeout {
        Some(timeout) => format!("no message on channel `{channel}` within {timeout}"),
        None => format!("the receive on channel `{channel}` timed out"),
    }
}
