//! The instances this process's open write transactions have claimed, so that a claim refuses,
//! as PostgreSQL's does, when another step of this process held its instance (decision 0048).
//!
//! On SQLite a claim is a read inside the write transaction, whose single writer is every row's
//! lock: a claimant waits for the write lock (up to the busy timeout) like any writer, and once it
//! has it, the holder has committed and the instance is free. Nothing in the database says it was
//! held. What this process knows: a session notes the instances held by the others when it
//! begins ([`Holdings::held`]), before it can wait for the write lock; its claim of one of them
//! refuses, after the wait, as held — the same answer PostgreSQL gives at once, and counted on
//! the claim-bounce meter. A claim of any other instance, and every other write, waits its turn
//! as before. Another process on the same file is not seen: its holdings are its own.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A claimed instance: its tenant and id.
pub type Key = (String, String);

/// Who holds what, and a copy of the held keys that a session takes at its start without
/// copying them.
#[derive(Default)]
pub struct Holdings {
    inner: Mutex<Inner>,
    sessions: AtomicU64,
}

#[derive(Default)]
struct Inner {
    /// Each held instance, and the session holding it.
    by: HashMap<Key, u64>,
    /// `by`'s keys, rebuilt on each change: few (a group's members, per lane) and changed once
    /// per claim, read at every session's start.
    view: Arc<HashSet<Key>>,
}

impl Holdings {
    /// A new session's id, and the instances other sessions hold as it begins.
    pub fn begin(&self) -> (u64, Arc<HashSet<Key>>) {
        let session = self.sessions.fetch_add(1, Ordering::Relaxed);
        (session, Arc::clone(&self.lock().view))
    }

    /// `session` holds `key` until it [`Holdings::release`]s it.
    pub fn hold(&self, session: u64, key: Key) {
        let mut inner = self.lock();
        if inner.by.insert(key, session).is_none() {
            inner.view = Arc::new(inner.by.keys().cloned().collect());
        }
    }

    /// Everything `session` held, as its transaction ends.
    pub fn release(&self, session: u64, keys: &[Key]) {
        let mut inner = self.lock();
        let before = inner.by.len();
        for key in keys {
            if inner.by.get(key) == Some(&session) {
                inner.by.remove(key);
            }
        }
        if inner.by.len() != before {
            inner.view = Arc::new(inner.by.keys().cloned().collect());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves the maps whole (each change is one
        // insert or remove, then the view): keep going.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One session's claims: released when it ends, committed or not.
pub struct Held {
    holdings: Arc<Holdings>,
    session: u64,
    /// What other sessions held as this one began.
    others: Arc<HashSet<Key>>,
    mine: Vec<Key>,
}

impl Held {
    pub fn begin(holdings: &Arc<Holdings>) -> Held {
        let (session, others) = holdings.begin();
        Held {
            holdings: Arc::clone(holdings),
            session,
            others,
            mine: Vec::new(),
        }
    }

    /// Whether another session held `key` as this one began.
    pub fn held_by_another(&self, key: &Key) -> bool {
        self.others.contains(key) && !self.mine.contains(key)
    }

    /// This session has claimed `key`.
    pub fn hold(&mut self, key: Key) {
        if !self.mine.contains(&key) {
            self.holdings.hold(self.session, key.clone());
            self.mine.push(key);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if !self.mine.is_empty() {
            self.holdings.release(self.session, &self.mine);
        }
    }
}
