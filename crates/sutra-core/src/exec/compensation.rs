//! Compensation (issue 34, `docs/design/time-and-undo.md` §4): the completions of nodes that
//! declared `compensate-with` are logged in the snapshot, oldest first, and a `compensate` node
//! runs their handlers newest first, one at a time, then goes on.
//!
//! The compensating token waits at its node (`TokenState::Compensating`) with the completions
//! still to undo; each handler runs on a token of its own (`Role::Compensation`), an ordinary
//! run of the handler node, so a task handler parks, is polled and completes as any task. The
//! step in which a handler's node completes marks its completion compensated and starts the
//! next handler: one commit, so a crash leaves either both or neither. A handler that fails
//! fails the instance with `SUTRA.RUNTIME.COMPENSATION.FAILED`; a restore runs that handler
//! again, and the completions already marked are not undone twice.

use serde_json::json;

use super::{Fate, Fault, Outcome, Run};
use crate::codes;
use crate::model::{Node, NodeKind};
use crate::snapshot::{Completion, Role, Token, TokenId, TokenState};
use crate::step::HistoryKind;

impl Run<'_> {
    /// Logs a completion of `node` by `token`, if the node can be compensated. A handler's own
    /// completion is not logged: undoing is not undone.
    pub(super) fn completed(&mut self, token: &Token, node: &Node) {
        if node.compensate_with.is_none() || matches!(token.role, Some(Role::Compensation { .. })) {
            return;
        }
        let within = self.scopes_around(token.parent);
        self.snap.compensations.push(Completion {
            node: node.id.clone(),
            within,
            compensated: false,
        });
    }

    /// The nodes of the scopes a token whose parent is `parent` runs inside, innermost first.
    fn scopes_around(&self, mut parent: Option<TokenId>) -> Vec<String> {
        let mut scopes = Vec::new();
        for _ in 0..=self.snap.tokens.len() {
            let Some(host) = parent.and_then(|id| self.snap.token(id)) else {
                break;
            };
            let at_scope = matches!(host.state, TokenState::Joining { .. })
                && self
                    .node_named(&host.node)
                    .is_ok_and(|node| matches!(node.kind, NodeKind::Scope(_)));
            if at_scope {
                scopes.push(host.node.clone());
            }
            parent = host.parent;
        }
        scopes
    }

    /// A token reaches a `compensate` node: the completions not yet compensated (inside
    /// `scope`, when it names one) are undone newest first.
    pub(super) fn compensate(&mut self, token: &mut Token, scope: Option<&str>) -> Outcome {
        let pending: Vec<u32> = (0..self.snap.compensations.len() as u32)
            .rev()
            .filter(|&entry| {
                let done = &self.snap.compensations[entry as usize];
                !done.compensated
                    && scope.is_none_or(|scope| done.within.iter().any(|s| s == scope))
            })
            .collect();
        let detail = json!({"completions": pending.len(), "scope": scope});
        self.record_at(HistoryKind::CompensationStarted, token, detail);
        token.state = TokenState::Compensating { pending };
        self.next_handler(token)
    }

    /// Starts the handler of the next completion, or, with none left, goes on after the node.
    fn next_handler(&mut self, compensating: &mut Token) -> Outcome {
        let node = self.node_named(&compensating.node)?;
        let TokenState::Compensating { pending } = &mut compensating.state else {
            return self.proceed(compensating, node.after);
        };
        if pending.is_empty() {
            compensating.state = TokenState::Ready;
            return self.proceed(compensating, node.after);
        }
        let entry = pending.remove(0);
        let undone = self.node_named(&self.snap.compensations[entry as usize].node)?;
        let handler = undone.compensate_with.ok_or_else(|| {
            Fault::new(
                codes::NODE_UNKNOWN.code,
                format!("node `{}` has no `compensate-with`", undone.id),
            )
        })?;
        let handler = Token {
            id: self.mint_token(),
            node: self.node_at(handler)?.id.clone(),
            parent: Some(compensating.id),
            state: TokenState::Ready,
            role: Some(Role::Compensation { entry }),
        };
        self.put_back(handler);
        Ok(Fate::Stays)
    }

    /// A handler's node completed: its completion is marked compensated, and the compensating
    /// token starts the next handler in the same step.
    pub(super) fn handler_done(&mut self, handler: &Token, entry: u32) -> Outcome {
        if let Some(done) = self.snap.compensations.get_mut(entry as usize) {
            done.compensated = true;
            let detail = json!({"entry": entry, "undoes": done.node});
            self.record_at(HistoryKind::Compensated, handler, detail);
        }
        let compensating = (self.snap.tokens.iter()).position(|token| {
            Some(token.id) == handler.parent
                && matches!(token.state, TokenState::Compensating { .. })
        });
        if let Some(at) = compensating {
            let mut compensating = self.snap.tokens.remove(at);
            let outcome = self.next_handler(&mut compensating);
            self.settle(compensating, outcome);
        }
        Ok(Fate::Ends)
    }

    /// A handler's failure, as the instance fails with it: compensation stopped part way.
    pub(super) fn compensation_failed(&self, failing: TokenId, node: &str, fault: Fault) -> Fault {
        let entry = self.snap.token(failing).and_then(|token| match token.role {
            Some(Role::Compensation { entry }) => Some(entry),
            _ => None,
        });
        let Some(undone) = entry.and_then(|entry| self.snap.compensations.get(entry as usize))
        else {
            return fault;
        };
        Fault::new(
            codes::COMPENSATION_FAILED.code,
            format!(
                "the compensation handler `{node}` of `{}` failed with {}: {}; repair it, then \
                 restore the instance to run it again and go on compensating",
                undone.node, fault.code, fault.detail
            ),
        )
    }
}
