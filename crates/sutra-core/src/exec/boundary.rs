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
use crate::snapshot::{ParkKind, Role, Token, TokenId, TokenState};
use crate::step::HistoryKind;

impl Run<'_> {
    /// Parks the token at a node that waits, with its reminder's timer beside it.
    pub(super) fn park_waiting(&mut self, token: &mut Token, node: &Node, kind: ParkKind) {
        self.park(token, kind);
        if let Some(remind) = &node.remind {
            let due = self.due_in(remind.after);
            self.satellite(token, Role::Reminder { fired: 0 }, ParkKind::Wait { due });
        }
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

/// Whether `token` is a satellite (a race arm or a reminder's timer) of `host`.
pub(super) fn is_satellite_of(token: &Token, host: TokenId) -> bool {
    token.parent == Some(host)
        && matches!(token.role, Some(Role::Arm { .. } | Role::Reminder { .. }))
}
