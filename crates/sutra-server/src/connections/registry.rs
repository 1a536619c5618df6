//! The open connections: what each is doing — waiting for a request, reading one's head, or
//! serving — when it is due to close, and which one gives its slot up when the server is full.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::warn;

use super::Limits;

/// What a connection is doing.
#[derive(Debug, Clone, Copy)]
enum Activity {
    /// Waiting for a request: nothing of one has arrived since `since`, its accept or its last
    /// answer.
    Idle { since: Instant },
    /// Part of a request's head arrived at `since`; the connection has served nothing since
    /// `idle_since`.
    Head { since: Instant, idle_since: Instant },
    /// Requests handed to the router and not yet answered in full.
    Serving { requests: usize },
}

/// Why a connection is closed before its client closes it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Close {
    /// No request for `sutra.http.idle-timeout`.
    Idle,
    /// A request's head took longer than `sutra.http.header-timeout`.
    Head,
    /// The server was full and this was its longest-idle connection.
    Evicted,
    /// The server is shutting down.
    Draining,
}

/// One open connection, shared by its task, its I/O, its requests and the registry.
pub(super) struct Connection {
    activity: Mutex<Activity>,
    /// A write found the socket full: part of an answer waits in hyper's buffer for the client
    /// to read it, so the connection is not idle even though no request is in flight.
    write_blocked: AtomicBool,
    evicted: AtomicBool,
    /// Wakes the connection's task to look at its activity (and deadline) again.
    changed: Notify,
    /// Tells the registry that a connection may have become idle, for a new one waiting for a
    /// slot.
    went_idle: Arc<Notify>,
}

impl Connection {
    fn new(went_idle: Arc<Notify>) -> Connection {
        Connection {
            activity: Mutex::new(Activity::Idle {
                since: Instant::now(),
            }),
            write_blocked: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            changed: Notify::new(),
            went_idle,
        }
    }

    fn activity(&self) -> MutexGuard<'_, Activity> {
        // The activity is a plain value, whole after any panic that poisoned its lock.
        self.activity.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn change(&self, to: impl FnOnce(Activity) -> Option<Activity>) {
        let mut activity = self.activity();
        if let Some(next) = to(*activity) {
            *activity = next;
            drop(activity);
            self.changed.notify_one();
        }
    }

    /// Bytes arrived: if no request was in flight, a request's head begins.
    pub(super) fn bytes_arrived(&self) {
        self.change(|activity| match activity {
            Activity::Idle { since } => Some(Activity::Head {
                since: Instant::now(),
                idle_since: since,
            }),
            _ => None,
        });
    }

    /// Whether the last write left part of an answer waiting for the client to read.
    pub(super) fn write_blocked(&self, blocked: bool) {
        self.write_blocked.store(blocked, Ordering::Relaxed);
    }

    /// A request's head was read and handed to the router; in flight until the guard drops,
    /// when its answer has been handed to hyper in full (or given up).
    pub(super) fn request_began(self: &Arc<Self>) -> InFlight {
        self.change(|activity| {
            let requests = match activity {
                Activity::Serving { requests } => requests + 1,
                _ => 1,
            };
            Some(Activity::Serving { requests })
        });
        InFlight(Arc::clone(self))
    }

    fn request_ended(&self) {
        self.change(|activity| match activity {
            Activity::Serving { requests } if requests > 1 => Some(Activity::Serving {
                requests: requests - 1,
            }),
            _ => Some(Activity::Idle {
                since: Instant::now(),
            }),
        });
        self.went_idle.notify_one();
    }

    /// Starts the wait it is in afresh.
    fn restart_clock(&self) {
        let now = Instant::now();
        self.change(|activity| match activity {
            Activity::Idle { .. } => Some(Activity::Idle { since: now }),
            Activity::Head { idle_since, .. } => Some(Activity::Head {
                since: now,
                idle_since,
            }),
            Activity::Serving { .. } => None,
        });
    }

    /// Since when the connection has had no request in flight, if it has none now.
    fn idle_since(&self) -> Option<Instant> {
        if self.write_blocked.load(Ordering::Relaxed) {
            return None;
        }
        match *self.activity() {
            Activity::Idle { since }
            | Activity::Head {
                idle_since: since, ..
            } => Some(since),
            Activity::Serving { .. } => None,
        }
    }

    /// Whether a request is in flight, or an answer still waits for its client to read it:
    /// checked by the connection's own task, between hyper's turns, so that an answer hyper
    /// has finished is either in the socket or seen as waiting.
    pub(super) fn is_busy(&self) -> bool {
        self.idle_since().is_none()
    }

    /// When the connection is due to close, and why, unless a request is in flight.
    fn deadline(&self, limits: &Limits) -> Option<(Instant, Close)> {
        match *self.activity() {
            Activity::Idle { since } => {
                Some((since + limits.idle_timeout.unsigned_abs(), Close::Idle))
            }
            Activity::Head { since, .. } => {
                Some((since + limits.header_timeout.unsigned_abs(), Close::Head))
            }
            Activity::Serving { .. } => None,
        }
    }

    /// Resolves when the connection is to close: the server drains, evicts it, or its deadline
    /// passes with no request in flight.
    pub(super) async fn until_closed(
        &self,
        limits: &Limits,
        draining: &mut tokio::sync::watch::Receiver<bool>,
    ) -> Close {
        loop {
            if self.evicted.load(Ordering::Relaxed) {
                return Close::Evicted;
            }
            let deadline = self.deadline(limits);
            let expiry = async {
                match deadline {
                    Some((at, _)) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // An error means the server's loop is gone: drain all the same.
                _ = draining.wait_for(|draining| *draining) => return Close::Draining,
                () = self.changed.notified() => {}
                () = expiry => {
                    if let Some((_, why)) = deadline {
                        if self.write_blocked.load(Ordering::Relaxed) {
                            // The client is still reading the last answer: not idle yet.
                            self.restart_clock();
                        } else {
                            return why;
                        }
                    }
                }
            }
        }
    }
}

/// A request in flight on its connection, until dropped.
pub(super) struct InFlight(Arc<Connection>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// Every open connection, and the slots that cap them.
pub(super) struct Registry {
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    slots: Arc<Semaphore>,
    cap: u32,
    went_idle: Arc<Notify>,
    /// Whether the last connection admitted found the server full: warned of once per episode.
    full: AtomicBool,
}

impl Registry {
    pub(super) fn new(cap: u32) -> Registry {
        Registry {
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            slots: Arc::new(Semaphore::new(cap as usize)),
            cap,
            went_idle: Arc::new(Notify::new()),
            full: AtomicBool::new(false),
        }
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        self.open.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for one more connection. At the cap, the connection idle the longest is closed
    /// to make room; with none idle, this waits until one is, or until one closes.
    pub(super) async fn slot(&self) -> OwnedSemaphorePermit {
        if let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() {
            self.full.store(false, Ordering::Relaxed);
            return slot;
        }
        if !self.full.swap(true, Ordering::Relaxed) {
            warn!(
                cap = self.cap,
                "at the connection cap (sutra.http.max-connections): closing the longest-idle \
                 connection for each new one, and holding new ones back while none is idle"
            );
        }
        let mut closing: Option<Arc<Connection>> = None;
        loop {
            // One eviction at a time, unless the one closing has taken a request since.
            if closing.as_ref().is_none_or(|c| c.idle_since().is_none()) {
                closing = self.close_longest_idle();
            }
            tokio::select! {
                slot = Arc::clone(&self.slots).acquire_owned() => {
                    return slot.expect("the slots' semaphore is never closed");
                }
                () = self.went_idle.notified() => {}
            }
        }
    }

    /// Registers a connection admitted into `slot`; it leaves the registry, and frees the slot,
    /// when the returned guard drops.
    pub(super) fn admit(self: &Arc<Self>, slot: OwnedSemaphorePermit) -> Admitted {
        let connection = Arc::new(Connection::new(Arc::clone(&self.went_idle)));
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open().insert(id, Arc::clone(&connection));
        Admitted {
            id,
            connection,
            registry: Arc::clone(self),
            _slot: slot,
        }
    }

    /// Asks the connection idle the longest to close, and returns it; none if every connection
    /// has a request in flight (or is closing already).
    pub(super) fn close_longest_idle(&self) -> Option<Arc<Connection>> {
        let victim = self
            .open()
            .values()
            .filter(|c| !c.evicted.load(Ordering::Relaxed))
            .filter_map(|c| c.idle_since().map(|since| (since, c)))
            .min_by_key(|(since, _)| *since)
            .map(|(_, c)| Arc::clone(c))?;
        victim.evicted.store(true, Ordering::Relaxed);
        victim.changed.notify_one();
        Some(victim)
    }

    /// Resolves once every connection has closed.
    pub(super) async fn all_closed(&self) {
        let _every_slot = self.slots.acquire_many(self.cap).await;
    }
}

/// A connection's place in the registry, held by its task.
pub(super) struct Admitted {
    id: u64,
    pub(super) connection: Arc<Connection>,
    registry: Arc<Registry>,
    _slot: OwnedSemaphorePermit,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        self.registry.open().remove(&self.id);
    }
}
