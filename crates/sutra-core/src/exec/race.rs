//! `race`: whichever arm fires first wins (BPMN's event-based gateway, decision 0050).
//!
//! The racing token waits at the node in `TokenState::Racing` and each arm is a satellite token
//! (`Role::Arm`) parked on an ordinary receive or timer park, all armed in the step that reaches
//! the race. The step that answers one arm disarms the others, so a message for a losing arm
//! that arrives afterwards finds no wait, as any uncorrelated message.

use serde_json::json;

use super::{Answer, Fault, Outcome, Run};
use crate::codes;
use crate::model::{ArmWait, NodeKind, RaceArm};
use crate::snapshot::{ParkId, ParkKind, Role, Token, TokenState};
use crate::step::{HistoryKind, Rejection};

impl Run<'_> {
    /// Arms every arm. All of them are evaluated before any is armed, so an arm whose key or
    /// time fails leaves the token ready at the race, to run it again after a restore.
    pub(super) fn race(&mut self, token: &mut Token, arms: &[RaceArm]) -> Outcome {
        let kinds = arms
            .iter()
            .map(|arm| self.arm_park(arm))
            .collect::<Result<Vec<_>, Fault>>()?;
        refuse_shared_keys(&kinds)?;
        token.state = TokenState::Racing;
        for (index, kind) in (0..).zip(kinds) {
            self.satellite(token, Role::Arm { index }, kind);
        }
        Ok(super::Fate::Stays)
    }

    fn arm_park(&self, arm: &RaceArm) -> Result<ParkKind, Fault> {
        Ok(match &arm.waits {
            ArmWait::Receive { channel, key } => ParkKind::Receive {
                channel: channel.clone(),
                key: key.eval_key(&self.bindings())?,
                due: None,
            },
            ArmWait::Wait(spec) => ParkKind::Wait {
                due: self.wait_due(spec)?,
            },
        })
    }

    /// Arm `index`, parked on `park`, fired: the other arms are disarmed and the racing token
    /// goes on where the arm says. Returns the racing token and what became of it, or `Stale`
    /// when no token races for the arm (a snapshot that does not match its flow).
    pub(super) fn race_won(
        &mut self,
        arm: Token,
        index: u32,
        park: ParkId,
        answer: Answer,
    ) -> Result<(Token, Outcome), Rejection> {
        let racer =
            self.snap.tokens.iter().position(|token| {
                Some(token.id) == arm.parent && token.state == TokenState::Racing
            });
        let Some(racer) = racer else {
            return Err(Rejection::Stale(Some(park)));
        };
        let mut host = self.snap.tokens.remove(racer);
        self.resolve_satellites(host.id);
        host.state = TokenState::Ready;
        let outcome = self.take_arm(&mut host, index, park, answer);
        Ok((host, outcome))
    }

    fn take_arm(&mut self, host: &mut Token, index: u32, park: ParkId, answer: Answer) -> Outcome {
        let node = self.node_named(&host.node)?;
        let arm = match &node.kind {
            NodeKind::Race(arms) => arms.get(index as usize),
            _ => None,
        };
        let Some(arm) = arm else {
            return Err(Fault::new(
                codes::NODE_UNKNOWN.code,
                format!("node `{}` has no race arm #{index}", node.id),
            ));
        };
        match answer {
            Answer::Message(message) => {
                let detail = json!({"park": park, "message": message.id, "arm": index});
                self.record_at(HistoryKind::MessageReceived, host, detail);
                if let Some(name) = &arm.output {
                    self.put_answer(name, message.data.clone())?;
                }
                self.msg = Some(message.to_json());
            }
            _ => {
                let detail = json!({"park": park, "arm": index});
                self.record_at(HistoryKind::TimerFired, host, detail);
            }
        }
        let next = match arm.after {
            crate::model::After::Node(next) => Some(self.node_at(next)?.id.as_str()),
            crate::model::After::End => None,
        };
        self.record_at(
            HistoryKind::RaceWon,
            host,
            json!({"arm": index, "next": next}),
        );
        self.proceed(host, arm.after)
    }
}

/// Two receive arms on one correlation key would be one alias twice: the second could never be
/// armed. Refused as a taken alias (SPEC §7.2), before anything is armed.
fn refuse_shared_keys(kinds: &[ParkKind]) -> Result<(), Fault> {
    let keys: Vec<(&str, &str)> = kinds
        .iter()
        .filter_map(|kind| match kind {
            ParkKind::Receive { channel, key, .. } => Some((channel.as_str(), key.as_str())),
            _ => None,
        })
        .collect();
    for (i, (channel, key)) in keys.iter().enumerate() {
        if keys[..i].contains(&(channel, key)) {
            return Err(Fault::new(
                codes::CORRELATION_ALIAS_TAKEN.code,
                format!(
                    "two arms of the race wait on channel `{channel}` with the same key `{key}`: \
                     give each arm a channel or a key of its own"
                ),
            ));
        }
    }
    Ok(())
}
