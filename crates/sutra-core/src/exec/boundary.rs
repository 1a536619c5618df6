//! Timers on a waiting node (decision 0050): a `deadline`, which ends the wait, and a `remind`,
//! which runs a branch beside it.
//!
//! A deadline is the waiting park's own timer (`due`): a task's or a receive's park is answered
//! by whichever comes first, its worker's result, its message or its timer, and the delivery
//! that answers it consumes every row of the park — so a task withdrawn by its deadline answers
//! a late completion with the lock-lost code, as a cancelled one does.
//!
//! A reminder cannot be the park's timer, since the wait goes on after it fires. It is a
//! satellite token (`Role::Reminder`) parked on a timer of its own beside the waiting token,
//! resolved in the step in which the waiting token leaves its node.

use serde_json::json;

use super::{Fate, Outcome, Run};
use crate::model::{Node, Remind};
use crate::snapshot::{ParkId, ParkKind, Role, Token, TokenId, TokenState};
use crate::step::{HistoryKind, Rejection};

impl Run<'_> {
    /// Parks the token at a node that waits, with its reminder's timer beside it.
    pub(super) fn park_waiting(&mut self, token: &mut Token, node: &Node, kind: ParkKind) {
        self.park(token, kind);
        self.arm_reminder(token, node);
    }

    /// Arms a loop's timers beside the looping token, which holds no park for its deadline to
    /// be the timer of: both its deadline and its reminder are satellites.
    pub(super) fn arm_loop_timers(&mut self, looping: &Token, node: &Node) {
        if let Some(deadline) = &node.deadline {
            let due = self.due_in(deadline.after);
            self.satellite(looping, Role::Deadline, ParkKind::Wait { due });
        }
        self.arm_reminder(looping, node);
    }

    fn arm_reminder(&mut self, host: &Token, node: &Node) {
        if let Some(remind) = &node.remind {
            let due = self.due_in(remind.after);
            self.satellite(host, Role::Reminder { fired: 0 }, ParkKind::Wait { due });
        }
    }

    /// A loop's or a scope's deadline fired: every token inside — a loop's bodies, a scope's
    /// block — is torn down with the other timers, and the waiting token goes on at the
    /// deadline's `next`. Returns the looping token and what
    /// became of it, or `Stale` when no token loops for the timer.
    pub(super) fn loop_deadline(
        &mut self,
        timer: &Token,
        park: ParkId,
    ) -> Result<(Token, Outcome), Rejection> {
        let looping = self.snap.tokens.iter().position(|token| {
            Some(token.id) == timer.parent
                && matches!(
                    token.state,
                    TokenState::Looping { .. } | TokenState::Joining { .. }
                )
        });
        let Some(looping) = looping else {
            return Err(Rejection::Stale(Some(park)));
        };
        let looping_id = self.snap.tokens[looping].id;
        // A loop's bodies and timers, or a scope's block and timers.
        self.clear_inside(looping_id);
        let Some(looping) = self.snap.tokens.iter().position(|t| t.id == looping_id) else {
            return Err(Rejection::Stale(Some(park)));
        };
        let mut looping = self.snap.tokens.remove(looping);
        looping.state = TokenState::Ready;
        let outcome = self.deadline_fired(&mut looping, park);
        Ok((looping, outcome))
    }

    /// Records a deadline that fired for `token`, and sends the token to its `next`.
    pub(super) fn deadline_fired(&mut self, token: &mut Token, park: ParkId) -> Outcome {
        self.record_at(HistoryKind::TimerFired, token, json!({"park": park}));
        let node = self.node_named(&token.node)?;
        let Some(deadline) = &node.deadline else {
            // The node lost its deadline (a snapshot that does not match its flow): wait on.
            return self.proceed(token, node.after);
        };
        let next = self.node_at(deadline.next)?.id.as_str();
        self.record_at(HistoryKind::DeadlineFired, token, json!({"next": next}));
        self.goto(token, deadline.next)
    }

    /// Forks a token that serves `host` at its node, parked on `kind`.
    pub(super) fn satellite(&mut self, host: &Token, role: Role, kind: ParkKind) {
        let mut satellite = Token {
            id: self.mint_token(),
            node: host.node.clone(),
            parent: Some(host.id),
            state: TokenState::Ready,
            role: Some(role),
        };
        self.park(&mut satellite, kind);
        self.put_back(satellite);
    }

    /// Resolves the satellites of `host`, which leaves its node: their parks are disarmed (or
    /// never armed, if they were made in this step) and the tokens are gone.
    pub(super) fn resolve_satellites(&mut self, host: TokenId) {
        // Every resume of an ordinary token comes here: most have no satellite to resolve,
        // and then the tokens are not rebuilt.
        if !self
            .snap
            .tokens
            .iter()
            .any(|token| is_satellite_of(token, host))
        {
            return;
        }
        let (satellites, others) = std::mem::take(&mut self.snap.tokens)
            .into_iter()
            .partition(|token| is_satellite_of(token, host));
        self.snap.tokens = others;
        for satellite in satellites {
            if let Some(park) = satellite.park() {
                self.release(park);
            }
        }
    }

    /// A reminder's timer fired while its host still waits: the reminder's list runs on a
    /// token of its own, and the timer is armed again when the reminder repeats.
    pub(super) fn remind(&mut self, timer: &mut Token, fired: u32) -> Outcome {
        let node = self.node_named(&timer.node)?;
        let fired = fired.saturating_add(1);
        self.record_at(HistoryKind::Reminded, timer, json!({"fired": fired}));
        let Some(Remind { every, head, .. }) = &node.remind else {
            // The node lost its reminder (a snapshot that does not match its flow).
            return Ok(Fate::Ends);
        };
        if let Some(&first) = head.as_ref() {
            let branch = Token {
                id: self.mint_token(),
                node: self.node_at(first)?.id.clone(),
                parent: None,
                state: TokenState::Ready,
                role: Some(Role::Detached),
            };
            self.put_back(branch);
        }
        let Some(every) = every else {
            return Ok(Fate::Ends);
        };
        timer.role = Some(Role::Reminder { fired });
        let due = self.due_in(*every);
        self.park(timer, ParkKind::Wait { due });
        Ok(Fate::Stays)
    }
}

impl Run<'_> {
    /// Parks every satellite again under a fresh park, due when it was: a migrated loop's
    /// timers, whose parks the migration disarmed.
    pub(super) fn rearm_satellites(&mut self) {
        let mut tokens = std::mem::take(&mut self.snap.tokens);
        for token in tokens.iter_mut().filter(|token| is_satellite(token)) {
            if let Some(kind) = token.park().map(|park| park.kind.clone()) {
                self.park(token, kind);
            }
        }
        self.snap.tokens = tokens;
    }
}

/// Whether `token` is a satellite (a race arm, a reminder's or a loop's deadline timer) of
/// `host`.
pub(super) fn is_satellite_of(token: &Token, host: TokenId) -> bool {
    token.parent == Some(host) && is_satellite(token)
}

/// Whether `token` is a satellite of some token.
pub(super) fn is_satellite(token: &Token) -> bool {
    matches!(
        token.role,
        Some(Role::Arm { .. } | Role::Reminder { .. } | Role::Deadline)
    )
}
