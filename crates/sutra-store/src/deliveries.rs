//! Deliveries (SPEC §5.6): what was asked of an instance — a timer, a relayed message, a task's
//! outcome — made durable before anyone tries to claim the instance, and taken by the step that
//! applies it.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::snapshot::ParkId;
use sutra_core::step::{ChildOutcome, Message, TaskError};

use crate::{Error, InstanceKey, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryId(pub i64);

/// An internal delivery: durable before anyone tries to claim its instance, deleted by the
/// step that takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub tenant: String,
    pub instance: String,
    pub park: ParkId,
    pub kind: DeliveryKind,
    pub due_at: Timestamp,
    /// How many times it was deferred: a claimant refused by a held claim, or (before the
    /// ceiling, docs/decisions/0047) a failed step.
    pub attempts: u32,
    /// How many times a dispatcher handed it out since it was asked or last deferred, none of
    /// which took it: the dispatch mark (docs/decisions/0024). Only a dispatcher that died with
    /// it, or whose step died, leaves a dispatch that neither took nor deferred it.
    pub dispatches: u32,
    /// How many steps that took it failed (a panic, a corrupt row): not a refusal by a held
    /// claim. Past `max-attempts` the dispatcher fails its instance (docs/decisions/0047).
    pub failures: u32,
    /// Why the last of those steps failed.
    pub last_error: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryKind {
    Timer,
    Relay {
        message: Message,
    },
    TaskCompleted {
        output: Value,
    },
    TaskFailed {
        code: String,
        message: String,
    },
    TaskExhausted {
        code: String,
        message: String,
    },
    /// An administrator's restore of a failed instance whose claim was held when it was asked
    /// (SPEC §5.6, §7.2). It answers no park: its park is [`RESTORE_PARK`].
    Restore,
    /// The message that starts a called instance (a child), asked by its parent's commit: the
    /// child is claimed to take it like any delivery, so its first step runs where and when a
    /// lane has room, not inside the parent's transaction. It answers no park: [`START_PARK`].
    Start {
        message: Message,
    },
    /// Cancel the instance: asked of a child when the parent's park that waits for it is
    /// disarmed (the parent cancelled, failed, or left the node). It answers no park:
    /// [`CANCEL_PARK`].
    Cancel,
    /// A child ended: asked of its parent's park by the child's final commit.
    ChildEnded {
        child: String,
        outcome: ChildOutcome,
    },
}

/// The park a restore delivery names: none, since no park of an instance is numbered 0.
pub const RESTORE_PARK: ParkId = ParkId(0);

/// The park a [`DeliveryKind::Start`] names: none, as a restore's ([`RESTORE_PARK`]).
pub const START_PARK: ParkId = ParkId(0);

/// The park a [`DeliveryKind::Cancel`] names: none, as a restore's ([`RESTORE_PARK`]).
pub const CANCEL_PARK: ParkId = ParkId(0);

impl DeliveryKind {
    /// The persisted form, `(kind, payload)`, shared by every backend so that a delivery written
    /// by one build is read by the next whatever the database.
    pub fn encode(&self) -> (&'static str, Value) {
        let error =
            |code: &str, message: &str| serde_json::json!({ "code": code, "message": message });
        match self {
            DeliveryKind::Timer => ("timer", Value::Null),
            DeliveryKind::Relay { message } => ("relay", message.to_json()),
            DeliveryKind::TaskCompleted { output } => ("task_completed", output.clone()),
            DeliveryKind::TaskFailed { code, message } => ("task_failed", error(code, message)),
            DeliveryKind::TaskExhausted { code, message } => {
                ("task_exhausted", error(code, message))
            }
            DeliveryKind::Restore => ("restore", Value::Null),
            DeliveryKind::Start { message } => ("start", message.to_json()),
            DeliveryKind::Cancel => ("cancel", Value::Null),
            DeliveryKind::ChildEnded { child, outcome } => {
                let payload = serde_json::json!({ "child": child, "outcome": outcome });
                ("child_ended", payload)
            }
        }
    }

    /// Reads what [`DeliveryKind::encode`] wrote.
    pub fn decode(kind: &str, payload: Value) -> Result<DeliveryKind> {
        let corrupt = |e: serde_json::Error| Error::Corrupt(format!("a `{kind}` delivery: {e}"));
        let error = |payload: Value| serde_json::from_value::<TaskError>(payload).map_err(corrupt);
        Ok(match kind {
            "timer" => DeliveryKind::Timer,
            "relay" => DeliveryKind::Relay {
                message: serde_json::from_value(payload).map_err(corrupt)?,
            },
            "task_completed" => DeliveryKind::TaskCompleted { output: payload },
            "task_failed" => {
                let TaskError { code, message } = error(payload)?;
                DeliveryKind::TaskFailed { code, message }
            }
            "task_exhausted" => {
                let TaskError { code, message } = error(payload)?;
                DeliveryKind::TaskExhausted { code, message }
            }
            "restore" => DeliveryKind::Restore,
            "start" => DeliveryKind::Start {
                message: serde_json::from_value(payload).map_err(corrupt)?,
            },
            "cancel" => DeliveryKind::Cancel,
            "child_ended" => {
                let (child, outcome) = match payload {
                    Value::Object(mut fields) => (fields.remove("child"), fields.remove("outcome")),
                    _ => (None, None),
                };
                let child = match child {
                    Some(Value::String(child)) => child,
                    _ => {
                        return Err(Error::Corrupt(format!(
                            "a `{kind}` delivery names no child"
                        )));
                    }
                };
                let outcome = outcome.unwrap_or(Value::Null);
                DeliveryKind::ChildEnded {
                    child,
                    outcome: serde_json::from_value(outcome).map_err(corrupt)?,
                }
            }
            other => return Err(Error::Corrupt(format!("unknown delivery kind `{other}`"))),
        })
    }
}

/// A delivery to record.
#[derive(Debug, Clone, PartialEq)]
pub struct NewDelivery {
    pub tenant: String,
    pub instance: String,
    pub park: ParkId,
    pub kind: DeliveryKind,
    pub due_at: Timestamp,
}

/// Asking, finding, deferring and discarding deliveries.
#[async_trait::async_trait]
pub trait Deliveries: Send + Sync {
    /// Records a delivery; durable when this returns.
    async fn ask(&self, delivery: &NewDelivery) -> Result<DeliveryId>;

    /// Hands out up to `limit` deliveries due at or before now, oldest due first, and marks each
    /// in the same statement: one dispatch more, and due again `redeliver_after` from now (the
    /// dispatcher's claim timeout, the look-again bound). A dispatcher that dies with the batch
    /// leaves it due again then, and no other dispatcher hands out a row of it meanwhile. Each
    /// is returned as it was when it came due, with its dispatches counting this one.
    async fn due_deliveries(
        &self,
        limit: u32,
        redeliver_after: SignedDuration,
    ) -> Result<Vec<Delivery>>;

    /// A delivery as it is stored: for the conformance suite, which checks what was asked.
    #[cfg(feature = "conformance")]
    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>>;

    /// Schedules the next attempt of a delivery whose claimant was refused, counting the attempt and clearing its dispatches: a deferral shows that the
    /// dispatcher survived the dispatch.
    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()>;

    /// Schedules the next attempt of a delivery whose step failed: counts one failure, keeps
    /// `error` as the last one and clears its dispatches, as [`Deliveries::defer`] does; a
    /// refusal by a held claim is a deferral, not a failure.
    async fn fail_attempt(&self, id: DeliveryId, until: Timestamp, error: &str) -> Result<()>;

    /// Deletes a delivery that can never apply (its park is gone, its instance ended).
    async fn discard(&self, id: DeliveryId) -> Result<()>;

    /// When the earliest pending delivery is due, if any.
    async fn next_due(&self) -> Result<Option<Timestamp>>;

    /// The nearest cancelled ancestor (its caller, its caller's caller, …) of each of
    /// `instances` that has one, in one look for a dispatcher's whole batch of starts: a called
    /// instance whose start finds one is cancelled instead of started, so that cancelling an
    /// instance stops its whole subtree from spawning, however far its cancels have come down
    /// (issue 48). An ancestor is looked for in its instance's tenant only.
    async fn cancelled_ancestors(
        &self,
        instances: &[InstanceKey],
    ) -> Result<Vec<(InstanceKey, String)>>;
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn message() -> Message {
        Message {
            id: "call:p:5".to_owned(),
            kind: "sutra.call".to_owned(),
            source: "/instances/p".to_owned(),
            subject: Some("refund".to_owned()),
            time: None,
            data: json!({ "amount": 10 }),
        }
    }

    /// The stored forms of a call's kinds, which every build after this one must still read.
    #[test]
    fn a_calls_kinds_are_stored_as_named_and_read_back() {
        let ended = |outcome| DeliveryKind::ChildEnded {
            child: "c".to_owned(),
            outcome,
        };
        let cases = [
            (
                DeliveryKind::Start { message: message() },
                "start",
                message().to_json(),
            ),
            (DeliveryKind::Cancel, "cancel", Value::Null),
            (
                ended(ChildOutcome::Completed { reply: json!(1) }),
                "child_ended",
                json!({ "child": "c", "outcome": { "status": "completed", "reply": 1 } }),
            ),
            (
                ended(ChildOutcome::Failed {
                    code: "X".to_owned(),
                    detail: "why".to_owned(),
                }),
                "child_ended",
                json!({ "child": "c", "outcome": { "status": "failed", "code": "X", "detail": "why" } }),
            ),
            (
                ended(ChildOutcome::Cancelled),
                "child_ended",
                json!({ "child": "c", "outcome": { "status": "cancelled" } }),
            ),
        ];
        for (kind, name, payload) in cases {
            assert_eq!(kind.encode(), (name, payload.clone()));
            assert_eq!(DeliveryKind::decode(name, payload).unwrap(), kind);
        }
    }

    /// Rows written before calls existed read as they always did.
    #[test]
    fn older_kinds_still_decode() {
        let error = json!({ "code": "C", "message": "m" });
        assert_eq!(
            DeliveryKind::decode("timer", Value::Null),
            Ok(DeliveryKind::Timer)
        );
        assert_eq!(
            DeliveryKind::decode("restore", Value::Null),
            Ok(DeliveryKind::Restore)
        );
        assert_eq!(
            DeliveryKind::decode("task_failed", error),
            Ok(DeliveryKind::TaskFailed {
                code: "C".to_owned(),
                message: "m".to_owned(),
            })
        );
        assert_eq!(
            DeliveryKind::decode("relay", message().to_json()),
            Ok(DeliveryKind::Relay { message: message() })
        );
    }

    #[test]
    fn a_child_ended_without_its_child_or_outcome_is_corrupt() {
        for payload in [
            json!({ "outcome": { "status": "cancelled" } }),
            json!({ "child": "c" }),
            json!({ "child": "c", "outcome": { "status": "vanished" } }),
            Value::Null,
        ] {
            let decoded = DeliveryKind::decode("child_ended", payload.clone());
            assert!(matches!(decoded, Err(Error::Corrupt(_))), "{payload}");
        }
    }
}
