//! Execution lanes (SPEC §6): identical loops, each on its own dedicated OS thread, driven
//! through the process-wide Tokio runtime's handle, taking their groups from one queue
//! (decision 0071).
//!
//! A lane takes the queued requests whose instance no other lane holds (up to
//! `sutra.engine.group.max`), holds their instances, runs them as one group commit
//! ([`crate::group`]) to completion, releases the instances, then takes again. An instance is so
//! on one lane at a time and its requests run in the order they were queued, which is what gives
//! *reply implies committed* and *a park never races its own completion* (seed 001, shape (a) per
//! group) — the affinity a hash of the instance's id gave when each lane had a queue of its own,
//! without splitting every burst across the lanes: a second lane starts a group beside one in
//! flight only once enough waits to make it a group worth its statements
//! ([`Queue::overlap_at`]), so at low load one group is in flight and at high load the lanes'
//! round trips overlap. Lanes own no reactor: their I/O registers with the process runtime, so a
//! lane's end can never strand a pooled connection (the restart hang the design text
//! describes). Lane loops never put work on the queue; only callers' tasks do, which makes a
//! deadlock between lanes impossible by construction.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use sutra_store::{Clock, LockedTask};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, oneshot};

use crate::error::Error;
use crate::group::{self, Member};
use crate::registry::Live;
use crate::request::{Completion, StepOutcome, StepRequest};
use crate::runner::Stepper;
use crate::shared::Shared;
use crate::test_switches;

/// This replica's lanes and the queue they take from.
pub(crate) struct Lanes {
    queue: Arc<Queue>,
    lanes: Vec<Lane>,
}

impl Lanes {
    /// Starts `config.lanes` lanes (at least one) on one queue, with `live` as their view.
    pub(crate) fn spawn(shared: &Arc<Shared>, live: &Arc<Live>) -> Lanes {
        let config = &shared.config;
        let count = config.lanes.max(1);
        let queue = Arc::new(Queue::new(
            Arc::clone(live),
            count,
            config.lane_queue_depth.saturating_mul(count),
            config.group_max.max(1),
        ));
        let lanes = (0..count)
            .map(|i| Lane::spawn(i, Arc::clone(shared), Arc::clone(&queue)))
            .collect();
        Lanes { queue, lanes }
    }

    /// Runs `request` on whichever lane takes it, after every request for its instance queued
    /// before it.
    pub(crate) async fn run(&self, request: StepRequest) -> Result<StepOutcome, Error> {
        let (answer, receive) = oneshot::channel();
        self.queue
            .push(Member::Step(Box::new(request), answer))
            .await?;
        receive.await.map_err(|_| Error::Closed)?
    }

    /// Completes a task on a lane, in its instance's order — the task's id names the instance
    /// ([`sutra_store::task_instance`]) — so that the completion can resume the instance in place.
    /// An id that names no instance finds no task on whichever lane takes it.
    pub(crate) async fn complete(
        &self,
        completion: Completion,
    ) -> Result<Option<LockedTask>, Error> {
        let (answer, receive) = oneshot::channel();
        self.queue
            .push(Member::Complete(Box::new(completion), answer))
            .await?;
        receive.await.map_err(|_| Error::Closed)?
    }

    /// Flips every lane to `live`; returns once no group started under an older view is in
    /// flight.
    pub(crate) async fn activate(&self, live: &Arc<Live>) {
        self.queue.activate(Arc::clone(live)).await;
    }

    /// The lanes that have been on one group for longer than `limit`.
    pub(crate) fn wedged(&self, limit: std::time::Duration) -> Vec<usize> {
        let stuck =
            |(i, lane): (usize, &Lane)| lane.busy_for().filter(|busy| *busy > limit).map(|_| i);
        self.lanes.iter().enumerate().filter_map(stuck).collect()
    }

    /// How many lanes are on a group now — each holds at least one claim — or, for `tenant`,
    /// on a group with one of its instances.
    pub(crate) fn busy(&self, tenant: Option<&str>) -> usize {
        self.lanes
            .iter()
            .filter(|lane| lane.busy_for().is_some())
            .filter(|lane| tenant.is_none_or(|tenant| lane.holds(tenant)))
            .count()
    }

    /// Per lane, the depth of the queue it takes from: the lanes share one, so each reads the
    /// same.
    pub(crate) fn queue_depths(&self) -> Vec<usize> {
        vec![self.queue.depth(); self.lanes.len()]
    }

    /// Lets the lanes finish what is queued, then waits for their threads to end.
    pub(crate) async fn stop(&self) {
        self.queue.stop();
        for lane in &self.lanes {
            lane.join().await;
        }
    }
}

struct Lane {
    in_hand: Arc<InHand>,
    /// The engine's, which `in_hand.since` is read from.
    clock: Clock,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// What a lane is on, as others read it.
#[derive(Default)]
struct InHand {
    /// When the group in hand started, as milliseconds since the epoch; 0 when idle. Readiness
    /// reads it: a lane stuck on one group is wedged, and a wedged replica must not take traffic.
    since: AtomicU64,
    /// The tenants of the group in hand, for a tenant's claims in flight (decision 0076).
    tenants: Mutex<BTreeSet<String>>,
}

impl InHand {
    /// A group of `members` started now; its tenants are set first, so that a lane read as busy
    /// always names them.
    fn start(&self, members: &[Member], clock: &Clock) {
        let mut tenants = self.tenants();
        for member in members {
            // Most groups are one tenant's: its name is copied once.
            if !tenants.contains(member.tenant()) {
                tenants.insert(member.tenant().to_owned());
            }
        }
        drop(tenants);
        self.since
            .store(epoch_millis(clock).max(1), Ordering::Relaxed);
    }

    fn end(&self) {
        self.since.store(0, Ordering::Relaxed);
        self.tenants().clear();
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // The set is replaced or cleared whole before the lock is let go.
        self.tenants
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Lane {
    fn spawn(index: usize, shared: Arc<Shared>, queue: Arc<Queue>) -> Lane {
        let handle = tokio::runtime::Handle::current();
        let in_hand = Arc::new(InHand::default());
        let clock = shared.clock.clone();
        let progress = Arc::clone(&in_hand);
        let thread = std::thread::Builder::new()
            .name(format!("sutra-lane-{index}"))
            .stack_size(sutra_core::expr::EVALUATION_STACK_BYTES)
            .spawn(move || handle.block_on(lane_loop(index, shared, queue, progress)))
            .expect("the operating system starts a lane thread");
        Lane {
            in_hand,
            clock,
            thread: std::sync::Mutex::new(Some(thread)),
        }
    }

    /// How long the lane has been on its current group; `None` when idle.
    fn busy_for(&self) -> Option<std::time::Duration> {
        let since = self.in_hand.since.load(Ordering::Relaxed);
        let now = epoch_millis(&self.clock);
        (since != 0).then(|| std::time::Duration::from_millis(now.saturating_sub(since)))
    }

    /// Whether the group in hand acts for `tenant`.
    fn holds(&self, tenant: &str) -> bool {
        self.in_hand.tenants().contains(tenant)
    }

    async fn join(&self) {
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

async fn lane_loop(index: usize, shared: Arc<Shared>, queue: Arc<Queue>, in_hand: Arc<InHand>) {
    let owner = shared.lane_owner(index);
    while let Some(taken) = queue.take(index, &shared).await {
        in_hand.start(&taken.members, &shared.clock);
        let Taken {
            members,
            holds,
            live,
        } = taken;
        let stepper = Stepper {
            shared: &shared,
            owner: &owner,
            live: &live,
        };
        // A panicking member is undone and answered by the group; the lane survives whatever
        // else escapes (one bad instance must not stop every other one).
        let _ = AssertUnwindSafe(group::run(&stepper, members))
            .catch_unwind()
            .await;
        in_hand.end();
        queue.release(index, &holds);
    }
}

/// The one queue the lanes take their groups from.
struct Queue {
    state: std::sync::Mutex<State>,
    /// Work worth a group is waiting (or the end is asked): one idle lane looks. Only then, so
    /// that a push beside a group in flight wakes no lane that would find nothing to start.
    work: Notify,
    /// A group ended: an activation waiting for the older view's groups looks again.
    ended: Notify,
    /// Backpressure: a full queue makes the caller wait for room, on the transport, where it
    /// belongs.
    room: Arc<Semaphore>,
    /// The most members a group carries (`sutra.engine.group.max`).
    group_max: usize,
}

struct State {
    waiting: VecDeque<Queued>,
    /// The instances a lane's group in flight acts on, and the lane.
    held: HashMap<String, usize>,
    /// Per lane, the view generation of the group it runs; `None` when idle.
    running: Vec<Option<u64>>,
    live: Arc<Live>,
    generation: u64,
    stopping: bool,
}

struct Queued {
    member: Member,
    instance: Option<String>,
    /// Taken regardless of who holds its instance ([`test_switches::stray`]).
    stray: bool,
    _room: OwnedSemaphorePermit,
}

/// A lane's group: its members, the instances it holds for them, and the view it runs under.
struct Taken {
    members: Vec<Member>,
    holds: Vec<String>,
    live: Arc<Live>,
}

impl Queue {
    fn new(live: Arc<Live>, lanes: usize, depth: usize, group_max: usize) -> Queue {
        Queue {
            state: std::sync::Mutex::new(State {
                waiting: VecDeque::new(),
                held: HashMap::new(),
                running: vec![None; lanes],
                live,
                generation: 0,
                stopping: false,
            }),
            work: Notify::new(),
            ended: Notify::new(),
            room: Arc::new(Semaphore::new(depth.max(1))),
            group_max,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every change to the state is whole before the lock is let go.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// How many must wait before a group starts beside one in flight: a sixteenth of the largest
    /// group, four at the default. Measured (decision 0071): a lane that waits for none overlaps
    /// nothing, and `two-tasks` at 64 clients ran a fifth slower; one that waits for sixteen
    /// starves `relay`, whose members each take several round trips (40 % slower than lanes with
    /// a queue each); four lost neither.
    fn overlap_at(&self) -> usize {
        (self.group_max / 16).max(1)
    }

    async fn push(&self, member: Member) -> Result<(), Error> {
        let room = Arc::clone(&self.room)
            .acquire_owned()
            .await
            .map_err(|_| Error::Closed)?;
        let queued = Queued {
            instance: member.instance().map(str::to_owned),
            stray: test_switches::stray(),
            member,
            _room: room,
        };
        let worth = {
            let mut state = self.lock();
            if state.stopping {
                return Err(Error::Closed);
            }
            state.waiting.push_back(queued);
            state.worth_a_group(self.overlap_at())
        };
        if worth {
            self.work.notify_one();
        }
        Ok(())
    }

    /// The next group for `lane`, once there is one worth starting; `None` once the queue is
    /// stopping and empty.
    async fn take(&self, lane: usize, shared: &Shared) -> Option<Taken> {
        let mut taken = loop {
            let notified = self.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut state = self.lock();
                if let Some(taken) = state.take(lane, self.group_max, self.overlap_at()) {
                    self.pass_on(&state);
                    break taken;
                }
                if state.stopping && state.waiting.is_empty() {
                    // A lane asleep behind this one's last group ends too.
                    self.work.notify_waiters();
                    return None;
                }
            }
            notified.await;
        };
        self.hold_open(lane, shared, &mut taken).await;
        Some(taken)
    }

    /// Adds what arrives within the group's window (`sutra.engine.group.window`) while the
    /// group has room. A push beside this group in flight wakes nobody until a group's worth
    /// waits, so the window's end takes what came meanwhile.
    async fn hold_open(&self, lane: usize, shared: &Shared, taken: &mut Taken) {
        let window = shared.config.group_window.unsigned_abs();
        if window.is_zero() {
            return;
        }
        let closes = shared.clock.instant() + window;
        loop {
            let notified = self.work.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            self.take_more(lane, taken);
            if taken.members.len() >= self.group_max {
                return;
            }
            if shared.clock.timeout_at(closes, notified).await.is_err() {
                return self.take_more(lane, taken);
            }
        }
    }

    /// Adds to `lane`'s group what it may take, and passes on the wake-up it may have consumed
    /// if what is left is worth another lane's group.
    fn take_more(&self, lane: usize, taken: &mut Taken) {
        let mut state = self.lock();
        state.take_more(lane, self.group_max, taken);
        self.pass_on(&state);
    }

    fn pass_on(&self, state: &State) {
        if state.worth_a_group(self.overlap_at()) {
            self.work.notify_one();
        }
    }

    /// `lane`'s group is over: its instances are free for the next.
    fn release(&self, lane: usize, holds: &[String]) {
        {
            let mut state = self.lock();
            // Only this lane's group held them: a stray held nothing.
            for instance in holds {
                state.held.remove(instance);
            }
            state.running[lane] = None;
        }
        // The lane itself takes next, without a wake-up: only an activation is told.
        self.ended.notify_waiters();
    }

    async fn activate(&self, live: Arc<Live>) {
        let generation = {
            let mut state = self.lock();
            state.generation += 1;
            state.live = live;
            state.generation
        };
        loop {
            let notified = self.ended.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let older = |running: &Option<u64>| running.is_some_and(|g| g < generation);
            if !self.lock().running.iter().any(older) {
                return;
            }
            notified.await;
        }
    }

    fn depth(&self) -> usize {
        self.lock().waiting.len()
    }

    /// No more work is taken in; the lanes end once what is queued has run.
    fn stop(&self) {
        self.lock().stopping = true;
        self.work.notify_waiters();
    }
}

impl State {
    /// A group for `lane`, if one is worth starting ([`State::worth_a_group`]).
    fn take(&mut self, lane: usize, group_max: usize, overlap_at: usize) -> Option<Taken> {
        if !self.worth_a_group(overlap_at) {
            return None;
        }
        let mut taken = Taken {
            members: Vec::new(),
            holds: Vec::new(),
            live: Arc::clone(&self.live),
        };
        self.take_more(lane, group_max, &mut taken);
        if taken.members.is_empty() {
            return None;
        }
        self.running[lane] = Some(self.generation);
        Some(taken)
    }

    /// Whether a lane should start a group now: work waits and no group is in flight, or
    /// `overlap_at` wait beside one (or a stray does).
    fn worth_a_group(&self, overlap_at: usize) -> bool {
        let in_flight = self.running.iter().any(Option::is_some);
        !self.waiting.is_empty()
            && (!in_flight
                || self.waiting.len() >= overlap_at
                || self.waiting.iter().any(|queued| queued.stray))
    }

    /// Moves into `taken`, in queue order and up to `group_max`, each waiting member whose
    /// instance no other lane holds, and holds its instance for `lane`. A member left waiting
    /// leaves every later one of its instance waiting too (another lane holds it), so an
    /// instance's requests run in the order they were queued.
    fn take_more(&mut self, lane: usize, group_max: usize, taken: &mut Taken) {
        let mut left = VecDeque::new();
        while let Some(queued) = self.waiting.pop_front() {
            if taken.members.len() >= group_max {
                left.push_back(queued);
                left.append(&mut self.waiting);
                break;
            }
            let holder = queued.instance.as_ref().and_then(|i| self.held.get(i));
            match holder {
                Some(other) if *other != lane && !queued.stray => left.push_back(queued),
                Some(_) => taken.members.push(queued.member),
                None => {
                    if let Some(instance) = queued.instance {
                        self.held.insert(instance.clone(), lane);
                        taken.holds.push(instance);
                    }
                    taken.members.push(queued.member);
                }
            }
        }
        self.waiting = left;
    }
}

fn epoch_millis(clock: &Clock) -> u64 {
    u64::try_from(clock.now().as_millisecond()).unwrap_or(0)
}
