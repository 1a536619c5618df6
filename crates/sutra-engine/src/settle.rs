//! The deferred-acknowledgement registry (SPEC §5.3, `ack: complete`).
//!
//! A caller held until its instance ends registers here *before* the step that could end the
//! instance commits, and is deregistered if that commit fails. The order matters once there is
//! more than one lane: registering after the commit leaves a window in which another lane
//! completes the instance and finds no one to tell. The invariant the transport relies on is:
//! *told to defer ⇒ registered ∧ committed*.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use sutra_core::step::Reply;
use tokio::sync::oneshot;

/// Held callers by instance id.
type Waiting = HashMap<String, Vec<(HoldId, oneshot::Sender<Reply>)>>;

#[derive(Default)]
pub struct SettleRegistry {
    waiting: Mutex<Waiting>,
    next: AtomicU64,
}

/// One held caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HoldId(u64);

/// A held caller's side: the reply arrives when the instance ends.
#[derive(Debug)]
pub struct Hold {
    pub instance: String,
    pub id: HoldId,
    pub reply: oneshot::Receiver<Reply>,
}

impl SettleRegistry {
    /// Registers a caller waiting for `instance` to end.
    pub fn register(&self, instance: &str) -> Hold {
        let id = HoldId(self.next.fetch_add(1, Ordering::Relaxed));
        let (sender, reply) = oneshot::channel();
        self.lock()
            .entry(instance.to_owned())
            .or_default()
            .push((id, sender));
        Hold {
            instance: instance.to_owned(),
            id,
            reply,
        }
    }

    /// Removes one caller: its commit failed, or it stopped waiting (ack timeout).
    pub fn deregister(&self, instance: &str, id: HoldId) {
        let mut waiting = self.lock();
        if let Some(holds) = waiting.get_mut(instance) {
            holds.retain(|(hold, _)| *hold != id);
            if holds.is_empty() {
                waiting.remove(instance);
            }
        }
    }

    /// Answers every caller held on `instance`. Called after the ending step committed.
    pub fn settle(&self, instance: &str, reply: &Reply) {
        let holds = self.lock().remove(instance).unwrap_or_default();
        for (_, sender) in holds {
            // A caller that stopped waiting dropped its receiver; nothing to tell it.
            let _ = sender.send(reply.clone());
        }
    }

    pub fn held(&self) -> usize {
        self.lock().values().map(Vec::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        // A panic while holding this lock cannot leave the map inconsistent (every operation is a
        // single insert or remove), so a poisoned lock is still safe to use.
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn registered_callers_get_the_reply() {
        let registry = SettleRegistry::default();
        let mut hold = registry.register("i1");
        registry.settle("i1", &Reply::Completed(json!({"ok": true})));
        assert_eq!(
            hold.reply.try_recv().unwrap(),
            Reply::Completed(json!({"ok": true}))
        );
        assert_eq!(registry.held(), 0);
    }

    #[test]
    fn a_deregistered_caller_is_not_answered_and_leaves_nothing_behind() {
        let registry = SettleRegistry::default();
        let mut hold = registry.register("i1");
        registry.deregister("i1", hold.id);
        registry.settle("i1", &Reply::Cancelled);
        assert!(hold.reply.try_recv().is_err());
        assert_eq!(registry.held(), 0);
    }
}
