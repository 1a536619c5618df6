//! The deferred-acknowledgement registry (SPEC §5.3, `ack: complete`).
//!
//! A caller held until its instance ends registers here *before* the step that could end the
//! instance commits, and is deregistered if that commit fails. The order matters once there is
//! more than one lane: registering after the commit leaves a window in which another lane
//! completes the instance and finds no one to tell. The invariant the transport relies on is:
//! *told to defer ⇒ registered ∧ committed*. A caller is deregistered however its wait ends, even
//! by its going away before it heard its step's answer: its [`Hold`] withdraws it when dropped.
//!
//! The registry is this process's. The step that registers a caller also records on the instance
//! which replica holds it ([`holder_after`]); a step that ends the instance on another replica
//! announces the end ([`held_elsewhere`]), and this replica answers its callers from the stored
//! outcome (`answers`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sutra_core::step::Reply;
use sutra_store::InstanceKey;
use tokio::sync::oneshot;

/// What an instance records as its holder when callers wait for it on more than one replica: no
/// replica's id, so that an ending step anywhere announces the end, to all of them.
pub const SEVERAL_HOLDERS: &str = "*";

/// Held callers by instance id, with the instance's tenant.
type Waiting = HashMap<String, Callers>;

struct Callers {
    tenant: String,
    held: Vec<(HoldId, oneshot::Sender<Reply>)>,
}

#[derive(Default)]
pub struct SettleRegistry {
    waiting: Arc<Mutex<Waiting>>,
    next: AtomicU64,
}

/// One held caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct HoldId(u64);

/// A held caller's side: the reply arrives when the instance ends. Dropped — answered, past its
/// `ack-timeout`, its step not committed, or its caller gone before it heard the step's answer
/// (the answer dropped with the caller's channel, which no line after the wait would see) — it
/// withdraws the registration ([`Withdrawal`]).
#[derive(Debug)]
pub struct Hold {
    pub reply: oneshot::Receiver<Reply>,
    pub withdrawal: Withdrawal,
}

impl SettleRegistry {
    /// Registers a caller waiting for the instance to end.
    pub fn register(&self, key: &InstanceKey) -> Hold {
        let id = HoldId(self.next.fetch_add(1, Ordering::Relaxed));
        let (sender, reply) = oneshot::channel();
        lock(&self.waiting)
            .entry(key.id.clone())
            .or_insert_with(|| Callers {
                tenant: key.tenant.clone(),
                held: Vec::new(),
            })
            .held
            .push((id, sender));
        Hold {
            reply,
            withdrawal: Withdrawal {
                waiting: Arc::clone(&self.waiting),
                instance: key.id.clone(),
                id,
            },
        }
    }

    /// Answers every caller held on `instance`. Called after the ending step committed.
    pub fn settle(&self, instance: &str, reply: &Reply) {
        let callers = lock(&self.waiting).remove(instance);
        for (_, sender) in callers.map(|callers| callers.held).unwrap_or_default() {
            // A caller that stopped waiting dropped its receiver; nothing to tell it.
            let _ = sender.send(reply.clone());
        }
    }

    pub fn held(&self) -> usize {
        lock(&self.waiting)
            .values()
            .map(|callers| callers.held.len())
            .sum()
    }

    /// The instances among `ids` that callers here wait for.
    pub fn held_among(&self, ids: &[String]) -> Vec<InstanceKey> {
        let waiting = lock(&self.waiting);
        ids.iter()
            .filter_map(|id| waiting.get_key_value(id))
            .map(key)
            .collect()
    }

    /// Every instance a caller here waits for.
    pub fn holding(&self) -> Vec<InstanceKey> {
        lock(&self.waiting).iter().map(key).collect()
    }
}

fn lock(waiting: &Mutex<Waiting>) -> std::sync::MutexGuard<'_, Waiting> {
    // A panic while holding this lock cannot leave the map inconsistent (every operation is a
    // single insert or remove), so a poisoned lock is still safe to use.
    waiting
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A held caller's registration, withdrawn when dropped, however its wait ended. Withdrawing a
/// caller already answered finds nothing to remove.
pub struct Withdrawal {
    waiting: Arc<Mutex<Waiting>>,
    instance: String,
    id: HoldId,
}

impl std::fmt::Debug for Withdrawal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Withdrawal({} on {})", self.id.0, self.instance)
    }
}

impl Drop for Withdrawal {
    fn drop(&mut self) {
        let mut waiting = lock(&self.waiting);
        if let Some(callers) = waiting.get_mut(&self.instance) {
            callers.held.retain(|(hold, _)| *hold != self.id);
            if callers.held.is_empty() {
                waiting.remove(&self.instance);
            }
        }
    }
}

fn key((id, callers): (&String, &Callers)) -> InstanceKey {
    InstanceKey {
        tenant: callers.tenant.clone(),
        id: id.clone(),
    }
}

/// Whom an instance records as its holder once replica `me` holds a caller on it too, given the
/// holder it recorded before: `me`, unless another replica holds one already.
pub fn holder_after(recorded: Option<&str>, me: &str) -> String {
    match recorded {
        None => me.to_owned(),
        Some(holder) if holder == me => me.to_owned(),
        Some(_) => SEVERAL_HOLDERS.to_owned(),
    }
}

/// Whether a caller on a replica other than `me` may wait for the instance, by the holder it
/// recorded: only then does a step of `me` that ends it announce the end. A caller that stopped
/// waiting leaves its holder recorded, which costs one announcement nobody needs.
pub fn held_elsewhere(recorded: Option<&str>, me: &str) -> bool {
    recorded.is_some_and(|holder| holder != me)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn i1() -> InstanceKey {
        InstanceKey {
            tenant: "acme".into(),
            id: "i1".into(),
        }
    }

    #[test]
    fn registered_callers_get_the_reply() {
        let registry = SettleRegistry::default();
        let mut hold = registry.register(&i1());
        registry.settle("i1", &Reply::Completed(json!({"ok": true})));
        assert_eq!(
            hold.reply.try_recv().unwrap(),
            Reply::Completed(json!({"ok": true}))
        );
        assert_eq!(registry.held(), 0);
    }

    #[test]
    fn a_withdrawn_caller_is_not_answered_and_leaves_nothing_behind() {
        let registry = SettleRegistry::default();
        let Hold {
            mut reply,
            withdrawal,
            ..
        } = registry.register(&i1());
        drop(withdrawal);
        registry.settle("i1", &Reply::Cancelled);
        assert!(reply.try_recv().is_err());
        assert_eq!(registry.held(), 0);
    }

    #[test]
    fn held_instances_are_found_with_their_tenant() {
        let registry = SettleRegistry::default();
        let _hold = registry.register(&i1());
        let ids = ["i0".to_owned(), "i1".to_owned()];
        assert_eq!(registry.held_among(&ids), vec![i1()]);
        assert_eq!(registry.holding(), vec![i1()]);
        registry.settle("i1", &Reply::Cancelled);
        assert!(registry.holding().is_empty());
    }

    #[test]
    fn an_instance_held_on_two_replicas_records_no_single_holder() {
        assert_eq!(holder_after(None, "a"), "a");
        assert_eq!(holder_after(Some("a"), "a"), "a");
        assert_eq!(holder_after(Some("b"), "a"), SEVERAL_HOLDERS);
        assert_eq!(holder_after(Some(SEVERAL_HOLDERS), "a"), SEVERAL_HOLDERS);
    }

    #[test]
    fn only_an_end_of_an_instance_held_elsewhere_is_announced() {
        assert!(!held_elsewhere(None, "a"));
        assert!(!held_elsewhere(Some("a"), "a"));
        assert!(held_elsewhere(Some("b"), "a"));
        assert!(held_elsewhere(Some(SEVERAL_HOLDERS), "a"));
    }
}
