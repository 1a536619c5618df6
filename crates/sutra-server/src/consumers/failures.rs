//! How many times each broker message's step failed on this replica (docs/decisions/0047): the
//! broker's ceiling, as the dispatcher's `failures` column is the deliveries'.
//!
//! A broker keeps no count of its own that fits: JetStream's delivered count includes the
//! redeliveries of a held claim, and AMQP's `redelivered` flag is one bit. The count is kept in
//! memory, per replica, by (tenant, channel, message id), and is forgotten when the message is
//! settled. It is bounded, not exact: a restart, or another replica taking the message, starts
//! it again, and a full map forgets one message to count another — each costs a message a few
//! more attempts, never one forever.

use std::collections::HashMap;
use std::sync::Mutex;

/// The most messages counted at once.
pub(super) const CAPACITY: usize = 10_000;

/// A message by tenant, channel and id.
pub(super) type MessageKey = (String, String, String);

pub(super) struct Failures {
    counts: Mutex<HashMap<MessageKey, u32>>,
    capacity: usize,
}

impl Failures {
    pub(super) fn new(capacity: usize) -> Failures {
        Failures {
            counts: Mutex::new(HashMap::new()),
            capacity,
        }
    }

    /// Counts one more failed step of the message; returns how many it has had.
    pub(super) fn count(&self, key: &MessageKey) -> u32 {
        let mut counts = self.lock();
        if !counts.contains_key(key) && counts.len() >= self.capacity {
            // Full: some other message's count starts again, which only delays its ceiling.
            let evicted = counts.keys().next().cloned();
            if let Some(evicted) = evicted {
                counts.remove(&evicted);
            }
        }
        let failures = counts.entry(key.clone()).or_insert(0);
        *failures = failures.saturating_add(1);
        *failures
    }

    /// The message was settled: acknowledged, rejected or dead-lettered.
    pub(super) fn forget(&self, key: &MessageKey) {
        self.lock().remove(key);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<MessageKey, u32>> {
        // A panic while the lock was held left at worst one count unchanged.
        self.counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> MessageKey {
        ("t".to_owned(), "orders".to_owned(), id.to_owned())
    }

    #[test]
    fn failures_are_counted_per_message_until_it_is_settled() {
        let failures = Failures::new(10);
        assert_eq!(
            [
                failures.count(&key("a")),
                failures.count(&key("a")),
                failures.count(&key("b"))
            ],
            [1, 2, 1]
        );
        failures.forget(&key("a"));
        assert_eq!(failures.count(&key("a")), 1, "settled: counted afresh");
    }

    #[test]
    fn a_full_map_forgets_one_message_to_count_another() {
        let failures = Failures::new(2);
        failures.count(&key("a"));
        failures.count(&key("b"));
        assert_eq!(failures.count(&key("c")), 1);
        assert_eq!(failures.lock().len(), 2, "never more than its capacity");
        assert_eq!(failures.count(&key("c")), 2, "the newest is kept");
    }
}
