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
        let depth = match self.call_room(&spec.flow) {
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
        let depth = self.call_room(flow)?;
        let kind = self.call_park(flow, None);
        self.park(body, kind);
        self.called(body, input, depth);
        Ok(Fate::Stays)
    }

    /// How deep a new child of this instance nests, once it is known to have room: within
    /// `sutra.call.max-depth`, `sutra.call.max-children` and its tenant's live instances.
    fn call_room(&mut self, flow: &str) -> Result<u32, Fault> {
        let depth = self.call_depth(flow)?;
        self.children_room(flow)?;
        self.tenant_room(flow)?;
        Ok(depth)
    }

    /// Whether the tenant may have one more live instance: a child is one, and a tree of calls
    /// is bounded by its tenant's quota where depth and breadth alone multiply (issue 48).
    fn tenant_room(&self, flow: &str) -> Result<(), Fault> {
        if u64::from(self.calls) < self.ctx.instances_room {
            return Ok(());
        }
        Err(Fault::new(
            codes::TENANT_LIVE_INSTANCES.code,
            format!(
                "calling flow `{flow}` would start an instance past the tenant's \
                 `sutra.tenants.max-live-instances`"
            ),
        ))
    }

    /// Whether the instance may wait for one more child: the children it waited for when the
    /// step began and those it called since, against `sutra.call.max-children`. Breadth is what
    /// the depth bound leaves open: a flow calling itself eight times a level made 48,000
    /// instances in 16 s (issue 48).
    fn children_room(&mut self, flow: &str) -> Result<(), Fault> {
        let before = *self.children_before.get_or_insert_with(|| {
            let waiting = self.before.tokens.iter().filter(|t| waits_for_child(t));
            u32::try_from(waiting.count()).unwrap_or(u32::MAX)
        });
        let children = before.saturating_add(self.calls);
        if children < self.ctx.call_children_max {
            return Ok(());
        }
        Err(Fault::new(
            codes::CALL_CHILDREN_EXCEEDED.code,
            format!(
                "calling flow `{flow}` would make {} children at once; `sutra.call.max-children` \
                 allows {}",
                children.saturating_add(1),
                self.ctx.call_children_max
            ),
        ))
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
        let child = child_id(self.ctx.now, self.ctx.id_seed, self.calls);
        self.calls += 1;
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
                self.set_output(node, reply)?;
                self.completed(token, node);
                self.proceed(token, node.after)
            }
            Err(fault) => {
                let Some(target) = node.on_error else {
                    return Err(fault);
                };
                let error = json!({"code": fault.code, "message": fault.detail, "instance": child});
                self.put_var("error", error);
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

/// The id of the `n`th child a step calls: a UUIDv7 of the step's time whose 74 random bits are
/// the step's seed plus `n`, modulo 2^74. Adding to the whole random field keeps every child of
/// one step distinct (for any `n` below 2^74), where adding to a byte that the UUID's version
/// nibble then overwrites made the 17th child the 1st again (issue 48). Children of different
/// steps differ by their seeds, drawn afresh per step (`StepContext::id_seed`).
fn child_id(now: jiff::Timestamp, seed: u128, n: u32) -> uuid::Uuid {
    const RAND_A: u128 = 0xFFF; // 12 bits, below the version nibble
    const RAND_B: u128 = (1 << 62) - 1; // 62 bits, below the variant
    let millis = u128::try_from(now.as_millisecond()).unwrap_or(0) & ((1 << 48) - 1);
    // The seed's own random fields, wherever a v4 or v7 UUID keeps them.
    let random = ((seed >> 64) & RAND_A) << 62 | (seed & RAND_B);
    let random = (random + u128::from(n)) & ((1 << 74) - 1);
    let bits = millis << 80 | 0x7 << 76 | (random >> 62) << 64 | 0b10 << 62 | (random & RAND_B);
    uuid::Uuid::from_u128(bits)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::child_id;

    proptest! {
        /// Every child one step calls has an id of its own, a UUIDv7 of the step's time, however
        /// many it calls and whatever its seed: the ids are what the children's rows are keyed by.
        #[test]
        fn the_children_of_one_step_never_share_an_id(
            seed in any::<u128>(),
            millis in 0i64..(1 << 47),
            calls in 1u32..2_000,
        ) {
            let now = jiff::Timestamp::from_millisecond(millis).expect("a time in range");
            let ids: Vec<uuid::Uuid> = (0..calls).map(|n| child_id(now, seed, n)).collect();
            let distinct: HashSet<&uuid::Uuid> = ids.iter().collect();
            prop_assert_eq!(distinct.len(), ids.len());
            for id in &ids {
                prop_assert_eq!(id.get_version_num(), 7);
                prop_assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
                let (secs, nanos) = id.get_timestamp().expect("a v7 timestamp").to_unix();
                prop_assert_eq!(
                    i64::try_from(secs).unwrap_or(i64::MAX) * 1000 + i64::from(nanos / 1_000_000),
                    millis
                );
            }
        }
    }

    /// The 17th child of a step was the 1st again (issue 48): the counter carried into a nibble
    /// the version then overwrote.
    #[test]
    fn the_seventeenth_child_is_not_the_first() {
        let now = jiff::Timestamp::from_millisecond(1_765_000_000_000).expect("a time");
        let seed = uuid::Uuid::now_v7().as_u128();
        assert_ne!(child_id(now, seed, 0), child_id(now, seed, 16));
    }
}
