//! `scope`: a block of nodes whose uncaught failures go to the scope's `on-error` and which its
//! `deadline` bounds (issue 34, `docs/design/time-and-undo.md` §3).
//!
//! A scope's token waits for its block as a `parallel` node's waits for a single branch
//! (`TokenState::Joining`), with the deadline's timer beside it as a satellite, as a loop's is.
//! Every token inside the block descends from the scope's token through `parent` — the block's
//! token, the branches it forks, the bodies and arms of the nodes it reaches — so "inside" is a
//! walk up the parents. A failure (`Run::fail`) is first offered to the innermost scope around
//! the failing token that has an `on-error`: every token inside is torn down in the same step
//! (tasks withdrawn, called instances cancelled, timers disarmed: each park is released as a
//! cancel releases it) and the scope's token goes on at `on-error` with `vars.error = {code,
//! message, node}`. A failure a node catches itself (its own `on-error`) never reaches here.

use std::collections::HashMap;

use serde_json::json;

use super::{Fault, Outcome, Run};
use crate::model::{Node, NodeIndex, NodeKind};
use crate::snapshot::{Token, TokenId, TokenState};
use crate::step::HistoryKind;

impl Run<'_> {
    /// A token reaches a `scope`: its block starts on a token of its own, and the scope's token
    /// waits for it to end, under the scope's deadline.
    pub(super) fn scope(
        &mut self,
        token: &mut Token,
        node: &Node,
        head: Option<NodeIndex>,
    ) -> Outcome {
        let Some(head) = head else {
            return self.proceed(token, node.after);
        };
        let outcome = self.fork(token, &[Some(head)])?;
        self.arm_loop_timers(token, node);
        Ok(outcome)
    }

    /// Offers the failure of `failing`, at `node`, to the scopes around it, innermost first;
    /// returns whether one with an `on-error` took it.
    pub(super) fn caught(&mut self, failing: TokenId, node: &str, fault: &Fault) -> bool {
        let Some((host, target)) = self.catching_scope(failing) else {
            return false;
        };
        self.clear_inside(host);
        let Some(at) = self.snap.tokens.iter().position(|t| t.id == host) else {
            return false;
        };
        let mut host = self.snap.tokens.remove(at);
        host.state = TokenState::Ready;
        let error = json!({"code": fault.code, "message": fault.detail, "node": node});
        self.put_var("error", error);
        let detail = json!({"node": node, "code": fault.code, "message": fault.detail});
        self.record_at(HistoryKind::ErrorCaught, &host, detail);
        let outcome = self.goto(&mut host, target);
        self.settle(host, outcome);
        true
    }

    /// The innermost token around `token` waiting at a `scope` that has an `on-error`, and
    /// where that goes.
    fn catching_scope(&self, token: TokenId) -> Option<(TokenId, NodeIndex)> {
        let parents: HashMap<TokenId, Option<TokenId>> = (self.snap.tokens.iter())
            .map(|t| (t.id, t.parent))
            .collect();
        let mut at = token;
        // A chain of parents is never longer than the tokens: a snapshot that loops stops here.
        for _ in 0..self.snap.tokens.len() {
            let host = (*parents.get(&at)?)?;
            let waiting = self.snap.token(host)?;
            if matches!(waiting.state, TokenState::Joining { .. })
                && let Ok(node) = self.node_named(&waiting.node)
                && let (NodeKind::Scope(_), Some(target)) = (&node.kind, node.on_error)
            {
                return Some((host, target));
            }
            at = host;
        }
        None
    }

    /// Tears down every token inside `host` — descending from it through `parent` — releasing
    /// each one's park: a scope's block, or a loop's bodies and timers.
    pub(super) fn clear_inside(&mut self, host: TokenId) {
        let parents: HashMap<TokenId, Option<TokenId>> = (self.snap.tokens.iter())
            .map(|t| (t.id, t.parent))
            .collect();
        let inside = |token: &Token| {
            let mut at = token.parent;
            for _ in 0..parents.len() {
                match at {
                    Some(parent) if parent == host => return true,
                    Some(parent) => at = parents.get(&parent).copied().flatten(),
                    None => return false,
                }
            }
            false
        };
        let (torn, kept): (Vec<Token>, Vec<Token>) = std::mem::take(&mut self.snap.tokens)
            .into_iter()
            .partition(inside);
        self.snap.tokens = kept;
        for token in torn {
            if let Some(park) = token.park() {
                self.release(park);
            }
        }
    }
}
