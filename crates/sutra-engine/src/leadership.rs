//! Leadership (SPEC §6): which replica runs each singleton role — `timers` (the delivery
//! dispatcher), `instance-sweeper`, `history-purger`, `retirement-gate`, and one
//! `channel:{tenant}:{channel}` per
//! channel declared `singleton: true`.
//!
//! A [`Leadership`] gives each role a signal: `Some(term)` while this replica leads it. There are
//! two: [`AlwaysLeading`] for the embedded store, where every process leads every role, and
//! [`Elected`] for a store a fleet shares, where one poll task per role keeps a lease row in the
//! database. Role loops run inside [`while_leading`], which starts them at each term and drops
//! them — mid-pass if need be — when the term ends.
//!
//! The rule that keeps two replicas from running one role at once: a term ends on a *local*
//! deadline that comes before the lease can expire in the database. It is counted from the moment
//! the acquire was sent, which is before the database stamped the expiry, on this process's
//! monotonic clock, and it falls a fifth of the TTL short — room for that clock to run slow
//! against the database's and for the dropped work to stop. Another replica can take the lease
//! only after it expired by the database's clock, so by then this one has stopped, whether it
//! renewed in vain, could not reach the database, or lost the lease. docs/decisions/0018.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::SignedDuration;
use sutra_store::{Clock, Lease, Store};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinHandle};
use tracing::{info, warn};

use crate::config::EngineConfig;
use crate::history_log;

pub const TIMERS: &str = "timers";
pub const INSTANCE_SWEEPER: &str = "instance-sweeper";
pub const HISTORY_PURGER: &str = "history-purger";
pub const RETIREMENT_GATE: &str = "retirement-gate";

/// The role of a channel declared `singleton: true`: consumed by one replica at a time.
pub fn channel_role(tenant: &str, channel: &str) -> String {
    format!("channel:{tenant}:{channel}")
}

/// The tenant of a [`channel_role`]; `None` for a role of the fleet's. A tenant's name has no
/// `:`, so the first one after the prefix ends it.
pub fn channel_role_tenant(role: &str) -> Option<&str> {
    let (tenant, _channel) = role.strip_prefix("channel:")?.split_once(':')?;
    Some(tenant)
}

/// How long giving the leases up at shutdown may take. A database out of reach cannot be told;
/// the leases then expire after their TTL, as if the replica had died.
const RELEASE_PATIENCE: Duration = Duration::from_secs(5);

/// The leadership `store` calls for: elected by lease where replicas share it, else every
/// process leads.
pub(crate) fn for_store(
    store: &Arc<dyn Store>,
    config: &EngineConfig,
    clock: &Clock,
) -> Arc<dyn Leadership> {
    if store.shared_by_replicas() {
        Arc::new(Elected::new(
            Arc::clone(store),
            config.replica_id.clone(),
            config.lease_ttl,
            config.lease_poll,
            clock.clone(),
        ))
    } else {
        Arc::new(AlwaysLeading::default())
    }
}

/// One stretch of leading a role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    /// The lease's epoch: larger than any earlier holder's, so work that could overlap with a
    /// previous holder's can be fenced with it. 0 where every replica leads.
    pub epoch: i64,
    /// When the role's work must have stopped unless a renewal extends the term: local (a
    /// reading of the engine's [`Clock::instant`]), and before the lease can expire in the
    /// database. `None`: never.
    pub until: Option<Instant>,
}

impl Term {
    /// Whether the term has not reached its deadline by `clock`.
    pub(crate) fn current(&self, clock: &Clock) -> bool {
        self.until.is_none_or(|until| until > clock.instant())
    }
}

/// A role's leadership as it changes: `Some` while this replica leads it.
pub type Signal = watch::Receiver<Option<Term>>;

#[async_trait::async_trait]
pub trait Leadership: Send + Sync {
    /// `role`'s signal. The first call registers the role: from then on this replica contends
    /// for it.
    fn role(&self, role: &str) -> Signal;
    /// Every role registered so far, with this replica's current term where it leads.
    fn roles(&self) -> Vec<(String, Option<Term>)>;
    /// Stops contending and gives up every lease held, so that other replicas take the roles at
    /// their next poll instead of waiting out the TTL. Call it once the role loops have stopped:
    /// a lease given up while its work still ran could overlap with the next holder's.
    async fn resign(&self);
}

/// The embedded store's leadership (SPEC §6): every process leads every role, at once and for
/// good. Correctness never rested on a role being single: claims serialize the dispatcher's
/// steps, and the sweep and the purge are idempotent and judge by the store's clock.
pub struct AlwaysLeading {
    always: watch::Sender<Option<Term>>,
    roles: Mutex<BTreeSet<String>>,
}

const FOR_GOOD: Term = Term {
    epoch: 0,
    until: None,
};

impl Default for AlwaysLeading {
    fn default() -> AlwaysLeading {
        AlwaysLeading {
            always: watch::Sender::new(Some(FOR_GOOD)),
            roles: Mutex::new(BTreeSet::new()),
        }
    }
}

#[async_trait::async_trait]
impl Leadership for AlwaysLeading {
    fn role(&self, role: &str) -> Signal {
        lock(&self.roles).insert(role.to_owned());
        self.always.subscribe()
    }

    fn roles(&self) -> Vec<(String, Option<Term>)> {
        lock(&self.roles)
            .iter()
            .map(|role| (role.clone(), Some(FOR_GOOD)))
            .collect()
    }

    async fn resign(&self) {}
}

/// Leadership by lease rows in a store a fleet shares (SPEC §6): each registered role has a poll
/// task that acquires or renews its lease every `poll` for `ttl`.
pub struct Elected {
    lease: LeaseTerms,
    contenders: Mutex<BTreeMap<String, Contender>>,
    resigned: watch::Sender<bool>,
}

/// What every poll task of one replica asks for.
#[derive(Clone)]
struct LeaseTerms {
    store: Arc<dyn Store>,
    holder: String,
    ttl: SignedDuration,
    poll: SignedDuration,
    clock: Clock,
}

struct Contender {
    signal: Signal,
    /// `None` once resigned.
    poller: Option<JoinHandle<()>>,
}

impl Elected {
    /// Leadership for replica `holder`, which must be unique per process (decision 0008): a
    /// restarted process that reused its predecessor's id would renew the predecessor's leases as
    /// its own.
    pub fn new(
        store: Arc<dyn Store>,
        holder: String,
        ttl: SignedDuration,
        poll: SignedDuration,
        clock: Clock,
    ) -> Elected {
        Elected {
            lease: LeaseTerms {
                store,
                holder,
                ttl,
                poll,
                clock,
            },
            contenders: Mutex::new(BTreeMap::new()),
            resigned: watch::Sender::new(false),
        }
    }
}

#[async_trait::async_trait]
impl Leadership for Elected {
    fn role(&self, role: &str) -> Signal {
        let mut contenders = lock(&self.contenders);
        if let Some(contender) = contenders.get(role) {
            return contender.signal.clone();
        }
        let (sender, signal) = watch::channel(None);
        let poller = (!*self.resigned.borrow()).then(|| {
            tokio::spawn(contend(
                self.lease.clone(),
                role.to_owned(),
                sender,
                self.resigned.subscribe(),
            ))
        });
        contenders.insert(
            role.to_owned(),
            Contender {
                signal: signal.clone(),
                poller,
            },
        );
        signal
    }

    fn roles(&self) -> Vec<(String, Option<Term>)> {
        lock(&self.contenders)
            .iter()
            .map(|(role, contender)| {
                let term = contender
                    .signal
                    .borrow()
                    .filter(|term| term.current(&self.lease.clock));
                (role.clone(), term)
            })
            .collect()
    }

    async fn resign(&self) {
        if self.resigned.send_replace(true) {
            return;
        }
        let (roles, pollers): (Vec<String>, Vec<JoinHandle<()>>) = lock(&self.contenders)
            .iter_mut()
            .map(|(role, contender)| (role.clone(), contender.poller.take()))
            .filter_map(|(role, poller)| Some((role, poller?)))
            .unzip();
        for poller in pollers {
            let _ = poller.await;
        }
        // Every role, held or not: an acquire cut short by the resignation may have succeeded.
        let LeaseTerms {
            store,
            holder,
            clock,
            ..
        } = &self.lease;
        let releases = roles.iter().map(|role| store.release_lease(role, holder));
        let released = futures_util::future::join_all(releases);
        match clock.timeout(RELEASE_PATIENCE, released).await {
            Ok(released) => {
                for (role, outcome) in roles.iter().zip(released) {
                    if let Err(error) = outcome {
                        warn!(role, %error, "could not give the lease up; it expires after its TTL");
                    }
                }
            }
            Err(_) => warn!("could not give the leases up in time; they expire after their TTL"),
        }
    }
}

/// One role's poll task: acquires or renews every `poll` until the replica resigns, then says
/// it leads no more.
async fn contend(
    lease: LeaseTerms,
    role: String,
    signal: watch::Sender<Option<Term>>,
    mut resigned: watch::Receiver<bool>,
) {
    loop {
        let asked = lease.clock.instant();
        tokio::select! {
            acquired = lease.store.acquire_lease(&role, &lease.holder, lease.ttl) => {
                record(&lease, &role, &signal, acquired, asked + local_term(lease.ttl));
            }
            _ = resigned.wait_for(|resigned| *resigned) => break,
        }
        tokio::select! {
            () = lease.clock.sleep(lease.poll.unsigned_abs()) => {}
            _ = resigned.wait_for(|resigned| *resigned) => break,
        }
    }
    let ended = signal.send_replace(None);
    if let Some(term) = ended.filter(|term| term.current(&lease.clock)) {
        history_log::lease_ended(&lease.holder, &role, term.epoch, "resigned");
    }
}

/// How long after sending an acquire this replica may act on the lease it returns: four fifths
/// of the TTL (see the module's documentation).
fn local_term(ttl: SignedDuration) -> Duration {
    let ttl = ttl.unsigned_abs();
    ttl - ttl / 5
}

fn record(
    lease_terms: &LeaseTerms,
    role: &str,
    signal: &watch::Sender<Option<Term>>,
    acquired: sutra_store::Result<Option<Lease>>,
    until: Instant,
) {
    let LeaseTerms { holder, clock, .. } = lease_terms;
    match acquired {
        // Granted too late to act on (this process froze while the acquire was in flight): no
        // work runs on it (`while_leading`), so it is not signalled, nor recorded as a term that
        // never ran, overlapping whoever took the lease meanwhile.
        Ok(Some(lease)) if until <= clock.instant() => {
            warn!(
                role,
                epoch = lease.epoch,
                "a lease reply came after the term it grants had run out; not leading on it"
            );
        }
        Ok(Some(lease)) => {
            let term = Term {
                epoch: lease.epoch,
                until: Some(until),
            };
            let previous = signal.send_replace(Some(term));
            // A term begins when this replica did not lead, or its last term ran out.
            let begins = previous
                .is_none_or(|previous| previous.epoch != term.epoch || !previous.current(clock));
            let left = until.saturating_duration_since(clock.instant());
            history_log::lease(holder, role, lease.epoch, begins, left);
            if previous.is_none_or(|previous| previous.epoch != term.epoch) {
                info!(role, epoch = lease.epoch, "leading");
            }
        }
        Ok(None) => {
            let mut ended = None;
            let held = signal.send_if_modified(|term| {
                ended = term.take();
                ended.is_some()
            });
            if let Some(term) = ended.filter(|term| term.current(clock)) {
                history_log::lease_ended(holder, role, term.epoch, "lost");
            }
            if held {
                warn!(
                    role,
                    "another replica holds the lease now; no longer leading"
                );
            }
        }
        // The term in hand still ends at its deadline: nothing to change until a poll succeeds.
        Err(error) => warn!(role, %error, "could not acquire or renew the lease"),
    }
}

/// This replica's role loops: each runs its role's work while this replica leads the role.
pub(crate) struct RoleLoops {
    leadership: Arc<dyn Leadership>,
    clock: Clock,
    /// Set when the role loops must stop for good (see [`RoleLoops::resign`]).
    resigned: watch::Sender<bool>,
    loops: Mutex<Vec<JoinHandle<()>>>,
}

impl RoleLoops {
    pub(crate) fn new(leadership: Arc<dyn Leadership>, clock: Clock) -> RoleLoops {
        RoleLoops {
            leadership,
            clock,
            resigned: watch::Sender::new(false),
            loops: Mutex::new(Vec::new()),
        }
    }

    /// Runs `work` as role `role`'s loop: while this replica leads it, until it resigns or the
    /// loop is aborted through the handle returned (a singleton channel no longer deployed).
    pub(crate) fn spawn<W, F>(&self, role: &str, work: W) -> AbortHandle
    where
        W: FnMut() -> F + Send + 'static,
        F: Future<Output = ()> + Send + 'static,
    {
        let signal = self.leadership.role(role);
        let stop = self.resigned.subscribe();
        let role = role.to_owned();
        let clock = self.clock.clone();
        let handle =
            tokio::spawn(async move { while_leading(&role, signal, stop, work, &clock).await });
        let abort = handle.abort_handle();
        let mut loops = lock(&self.loops);
        loops.retain(|running| !running.is_finished());
        loops.push(handle);
        abort
    }

    /// Stops the role loops, then gives up this replica's leases: in that order, so that no
    /// role's work outlives the lease it ran under.
    pub(crate) async fn resign(&self) {
        self.resigned.send_replace(true);
        let loops = std::mem::take(&mut *lock(&self.loops));
        for handle in loops {
            let _ = handle.await;
        }
        self.leadership.resign().await;
    }
}

/// Runs `work` while `signal` says this replica leads `role`, until `stop` is set. Each term
/// starts a fresh `work()`; the term's end drops it, wherever it is: at the local deadline when
/// no renewal came, on losing the lease, or on a new epoch (someone else led in between, so what
/// the work held in memory is stale). The end is looked for before the work is polled again, so
/// a process that wakes from a freeze past its deadline stops without taking another step.
pub(crate) async fn while_leading<W, F>(
    role: &str,
    mut signal: Signal,
    mut stop: watch::Receiver<bool>,
    mut work: W,
    clock: &Clock,
) where
    W: FnMut() -> F,
    F: Future<Output = ()>,
{
    while let Some(mut term) = next_term(&mut signal, &mut stop, clock).await {
        let running = work();
        tokio::pin!(running);
        loop {
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                () = deadline(term.until, clock) => {
                    warn!(role, epoch = term.epoch, "the lease was not renewed in time: stopping the role");
                    break;
                }
                changed = signal.changed() => {
                    let next = changed.ok().and_then(|()| *signal.borrow_and_update());
                    match next {
                        Some(renewed) if renewed.epoch == term.epoch => term = renewed,
                        _ => break,
                    }
                }
                () = &mut running => return,
            }
        }
    }
}

/// The next term that has not ended yet; `None` once `stop` is set or no term can come.
async fn next_term(
    signal: &mut Signal,
    stop: &mut watch::Receiver<bool>,
    clock: &Clock,
) -> Option<Term> {
    loop {
        if *stop.borrow() {
            return None;
        }
        let term = *signal.borrow_and_update();
        if let Some(term) = term.filter(|term| term.current(clock)) {
            return Some(term);
        }
        tokio::select! {
            changed = signal.changed() => changed.ok()?,
            _ = stop.changed() => return None,
        }
    }
}

async fn deadline(until: Option<Instant>, clock: &Clock) {
    match until {
        Some(until) => clock.sleep_until(until).await,
        None => std::future::pending().await,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests;
