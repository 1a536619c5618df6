//! `call`: another flow of the deployment runs as an instance of its own (a child), and the
//! calling token waits for it to end (BPMN's call activity; decision 0052).
//!
//! The calling token parks on a `Call` park naming the child, and the step emits the child's
//! start beside the park's arm: the engine inserts the child, `created`, in the caller's commit,
//! and the child's own claim takes its start. The child's final step answers the park with how
//! it ended (`Effect::Answer`, written in that step's commit). A completed child moves the
//! caller on with its reply; a failed or cancelled one goes to `on-error` — or, for a failure
//! without `on-error`, the caller keeps waiting on the same park, so that an operator who
//! restores the child resumes the caller when the child completes. Releasing a `Call` park in
//! any other way (a cancel, a failure, a deadline) cancels the child: the store asks it of every
//! live child of the park.

use serde_json::{Value, json};

use super::answers::Answer;
use super::{Fate, Fault, Outcome, Run};
use crate::codes;
use crate::model::{CallSpec, Node};
use crate::snapshot::{ChildFailure, ParkId, ParkKind, Token, TokenState};
use crate::step::{ChildOutcome, ChildStart, Effect, HistoryKind};

impl Run<'_> {
    /// A token reaches a `call` node: the child is called with the rendered input, and the token
    /// waits for it under the node's deadline and reminder. A call nested too deep goes to the
    /// node's `on-error`.
    pub(super) fn call(&mut self, token: &mut Token, node: &Node, spec: &CallSpec) -> Outcome {
        let depth = match self.call_depth(&spec.flow) {
            Ok(depth) => depth,
            Err(fault) => return self.route_error(token, node, &fault.code, fault.detail),
        };
        let input = spec.input.render(&self.bindings())?;
        let due = node.deadline.as_ref().map(|d| self.due_in(d.after));
        let kind = self.call_park(&spec.flow, due);
        self.park_waiting(token, node, kind);
        self.called(token, input, depth);
        Ok(Fate::Stays)
    }

    /// A `for-each` body calls its item's child: it waits with no timer of its own (the loop's
    /// deadline is the loop's).
    pub(super) fn call_body(&mut self, body: &mut Token, flow: &str, input: Value) -> Outcome {
        let depth = self.call_depth(flow)?;
        let kind = self.call_park(flow, None);
        self.park(body, kind);
        self.called(body, input, depth);
        Ok(Fate::Stays)
    }

    /// How deep a child of this instance nests: one below this instance.
    fn call_depth(&self, flow: &str) -> Result<u32, Fault> {
        let depth = (self.snap.instance.parent.as_ref()).map_or(0, |caller| caller.depth) + 1;
        if depth <= self.ctx.call_depth_max {
            return Ok(depth);
        }
        Err(Fault::new(
            codes::CALL_DEPTH_EXCEEDED.code,
            format!(
                "calling flow `{flow}` would nest {depth} calls deep; `sutra.call.max-depth` \
                 allows {}",
                self.ctx.call_depth_max
            ),
        ))
    }

    /// A park for a new child of `flow`, whose id is minted from the step's time and seed.
    fn call_park(&mut self, flow: &str, due: Option<jiff::Timestamp>) -> ParkKind {
        let seed = self.ctx.id_seed.wrapping_add(u128::from(self.calls));
        self.calls += 1;
        let millis = u64::try_from(self.ctx.now.as_millisecond()).unwrap_or(0);
        let random: [u8; 10] = seed.to_le_bytes()[..10].try_into().unwrap_or([0; 10]);
        let child = uuid::Builder::from_unix_timestamp_millis(millis, &random).into_uuid();
        ParkKind::Call {
            flow: flow.to_owned(),
            child: child.to_string(),
            due,
            failed: None,
        }
    }

    /// Records the call the token just parked on, and asks for its child.
    fn called(&mut self, token: &Token, input: Value, depth: u32) {
        let Some(park) = token.park() else {
            return;
        };
        let ParkKind::Call { flow, child, .. } = &park.kind else {
            return;
        };
        let detail = json!({"park": park.id, "child": child, "flow": flow});
        let start = ChildStart {
            id: child.clone(),
            flow: flow.clone(),
            input,
            node: token.node.clone(),
            depth,
        };
        let park = park.id;
        self.record_at(HistoryKind::Called, token, detail);
        self.effects.push(Effect::Call { park, child: start });
    }

    /// The child of the token's call ended: a reply moves the token on; a failure or a cancel
    /// goes to `on-error` with `vars.error = {code, message, instance}`, or fails the instance.
    pub(super) fn child_ended(
        &mut self,
        token: &mut Token,
        node: &Node,
        park: ParkId,
        child: String,
        outcome: ChildOutcome,
    ) -> Outcome {
        self.record_child_end(token, park, &child, &outcome);
        match child_error(&child, outcome) {
            Ok(reply) => {
                self.set_output(node, reply);
                self.completed(token, node);
                self.proceed(token, node.after)
            }
            Err(fault) => {
                let Some(target) = node.on_error else {
                    return Err(fault);
                };
                let error = json!({"code": fault.code, "message": fault.detail, "instance": child});
                self.snap.vars.insert("error".into(), error);
                self.goto(token, target)
            }
        }
    }

    /// A child that failed where its call has no `on-error` is not its caller's failure: the
    /// token keeps waiting on the same park, which records why, until the child is restored
    /// and ends again. Returns whether the answer left the token waiting so.
    pub(super) fn waits_on(&mut self, token: &mut Token, park: ParkId, answer: &Answer) -> bool {
        let Answer::Child {
            child,
            outcome: outcome @ ChildOutcome::Failed { code, detail },
        } = answer
        else {
            return false;
        };
        let catches = self.node_named(&token.node).map(|node| node.on_error);
        let waited = self.before.token_parked_on(park).and_then(Token::park);
        let (Ok(None), Some(waited)) = (catches, waited) else {
            return false;
        };
        let mut kept = waited.clone();
        if let ParkKind::Call { failed, .. } = &mut kept.kind {
            *failed = Some(ChildFailure {
                code: code.clone(),
                detail: detail.clone(),
            });
        }
        token.state = TokenState::Parked(kept);
        self.record_child_end(token, park, child, outcome);
        true
    }

    pub(super) fn record_child_end(
        &mut self,
        token: &Token,
        park: ParkId,
        child: &str,
        outcome: &ChildOutcome,
    ) {
        let mut detail = json!({"park": park, "child": child});
        match outcome {
            ChildOutcome::Completed { .. } => detail["status"] = json!("completed"),
            ChildOutcome::Failed { code, detail: why } => {
                detail["status"] = json!("failed");
                detail["code"] = json!(code);
                detail["detail"] = json!(why);
            }
            ChildOutcome::Cancelled => detail["status"] = json!("cancelled"),
        }
        self.record_at(HistoryKind::ChildEnded, token, detail);
    }
}

/// The reply of a completed child, or the error of one that failed or was cancelled.
pub(super) fn child_error(child: &str, outcome: ChildOutcome) -> Result<Value, Fault> {
    match outcome {
        ChildOutcome::Completed { reply } => Ok(reply),
        ChildOutcome::Failed { code, detail } => Err(Fault::new(&code, detail)),
        ChildOutcome::Cancelled => Err(Fault::new(
            codes::CALL_CANCELLED.code,
            format!("the called instance {child} was cancelled"),
        )),
    }
}

/// Whether `token` waits for a called instance.
pub(super) fn waits_for_child(token: &Token) -> bool {
    token
        .park()
        .is_some_and(|park| matches!(park.kind, ParkKind::Call { .. }))
}
