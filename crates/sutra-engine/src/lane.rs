//! Execution lanes (SPEC §6): identical loops, each on its own dedicated OS thread, driven
//! through the process-wide Tokio runtime's handle.
//!
//! A lane receives a request and whatever else is already queued behind it (up to
//! `sutra.engine.group.max`), runs them as one group commit ([`crate::group`]) to completion,
//! then receives the next. That per-lane total order of groups is what gives *reply implies
//! committed* and *a park never races its own completion* (seed 001, shape (a) per group). Lanes own no reactor: their I/O registers with the process runtime, so
//! a lane's end can never strand a pooled connection (the restart hang the design text
//! describes). Lane loops never send into another lane's queue; only callers' tasks do, which
//! makes an inter-lane deadlock impossible by construction.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::FutureExt;
use sutra_store::LockedTask;
use tokio::sync::{mpsc, oneshot};

use crate::error::Error;
use crate::group::{self, Member};
use crate::registry::Live;
use crate::request::{Completion, StepOutcome, StepRequest};
use crate::runner::Stepper;
use crate::shared::Shared;
use crate::test_switches;

/// This replica's lanes, and the routing of each instance to the lane that owns it.
pub(crate) struct Lanes {
    lanes: Vec<Lane>,
}

impl Lanes {
    /// Starts `config.lanes` lanes (at least one), each with its own view of `live`.
    pub(crate) fn spawn(shared: &Arc<Shared>, live: &Arc<Live>) -> Lanes {
        let config = &shared.config;
        let lanes = (0..config.lanes.max(1))
            .map(|i| {
                Lane::spawn(
                    i,
                    Arc::clone(shared),
                    Arc::clone(live),
                    config.lane_queue_depth,
                )
            })
            .collect();
        Lanes { lanes }
    }

    /// Runs `request` on the lane that owns its instance.
    pub(crate) async fn run(&self, request: StepRequest) -> Result<StepOutcome, Error> {
        let lane = self.owner_of(&request.key.id);
        let (answer, receive) = oneshot::channel();
        lane.send(Member::Step(Box::new(request), answer)).await?;
        receive.await.map_err(|_| Error::Closed)?
    }

    /// Completes a task on the lane that owns its instance, which the task's id names
    /// ([`sutra_store::task_instance`]), so that the completion can resume the instance in place.
    /// An id that names no instance finds no task on whichever lane it lands.
    pub(crate) async fn complete(
        &self,
        completion: Completion,
    ) -> Result<Option<LockedTask>, Error> {
        let instance = sutra_store::task_instance(&completion.task).unwrap_or(&completion.task);
        let lane = self.owner_of(instance);
        let (answer, receive) = oneshot::channel();
        lane.send(Member::Complete(Box::new(completion), answer))
            .await?;
        receive.await.map_err(|_| Error::Closed)?
    }

    /// The lane that owns `instance` (affinity by a stable hash of its id). A test-only switch
    /// can send the request elsewhere ([`test_switches`]).
    fn owner_of(&self, instance: &str) -> &Lane {
        let hash = xxhash_rust::xxh3::xxh3_64(instance.as_bytes());
        let owner = (hash % self.lanes.len() as u64) as usize;
        &self.lanes[test_switches::route(owner, self.lanes.len())]
    }

    /// Flips every lane to `live`; returns once each has.
    pub(crate) async fn activate(&self, live: &Arc<Live>) -> Result<(), Error> {
        for lane in &self.lanes {
            lane.activate(Arc::clone(live)).await?;
        }
        Ok(())
    }

    /// The lanes that have been on one request for longer than `limit`.
    pub(crate) fn wedged(&self, limit: std::time::Duration) -> Vec<usize> {
        let stuck =
            |(i, lane): (usize, &Lane)| lane.busy_for().filter(|busy| *busy > limit).map(|_| i);
        self.lanes.iter().enumerate().filter_map(stuck).collect()
    }

    /// How many lanes are on a request now: each holds at least one claim.
    pub(crate) fn busy(&self) -> usize {
        self.lanes
            .iter()
            .filter(|lane| lane.busy_for().is_some())
            .count()
    }

    pub(crate) fn queue_depths(&self) -> Vec<usize> {
        self.lanes.iter().map(Lane::queue_depth).collect()
    }

    /// Lets every lane finish what is queued, then waits for their threads to end.
    pub(crate) async fn stop(&self) {
        for lane in &self.lanes {
            lane.stop().await;
        }
    }
}

enum LaneRequest {
    Work(Member),
    /// Replace this lane's view of the deployments; answered once the lane has flipped.
    Activate(Arc<Live>, oneshot::Sender<()>),
    /// Finish: the loop ends after the requests queued before this one.
    Stop,
}

struct Lane {
    sender: mpsc::Sender<LaneRequest>,
    /// When the request in hand started, as milliseconds since the epoch; 0 when idle. Readiness
    /// reads it: a lane stuck on one request is wedged, and a wedged replica must not take traffic.
    busy_since: Arc<AtomicU64>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Lane {
    fn spawn(index: usize, shared: Arc<Shared>, live: Arc<Live>, depth: usize) -> Lane {
        let (sender, receiver) = mpsc::channel(depth);
        let handle = tokio::runtime::Handle::current();
        let owner = shared.lane_owner(index);
        let busy_since = Arc::new(AtomicU64::new(0));
        let progress = Arc::clone(&busy_since);
        let thread = std::thread::Builder::new()
            .name(format!("sutra-lane-{index}"))
            .spawn(move || handle.block_on(lane_loop(shared, owner, live, receiver, progress)))
            .expect("the operating system starts a lane thread");
        Lane {
            sender,
            busy_since,
            thread: std::sync::Mutex::new(Some(thread)),
        }
    }

    /// Hands work to the lane; its answer arrives on the member's own channel. A full queue
    /// makes the caller wait here: backpressure on the transport, where it belongs.
    async fn send(&self, member: Member) -> Result<(), Error> {
        self.sender
            .send(LaneRequest::Work(member))
            .await
            .map_err(|_| Error::Closed)
    }

    async fn activate(&self, live: Arc<Live>) -> Result<(), Error> {
        let (answer, receive) = oneshot::channel();
        self.sender
            .send(LaneRequest::Activate(live, answer))
            .await
            .map_err(|_| Error::Closed)?;
        receive.await.map_err(|_| Error::Closed)
    }

    /// How long the lane has been on its current request; `None` when idle.
    fn busy_for(&self) -> Option<std::time::Duration> {
        let since = self.busy_since.load(Ordering::Relaxed);
        (since != 0).then(|| std::time::Duration::from_millis(epoch_millis().saturating_sub(since)))
    }

    fn queue_depth(&self) -> usize {
        self.sender.max_capacity() - self.sender.capacity()
    }

    /// Lets the lane finish what is queued, then waits for its thread to end.
    async fn stop(&self) {
        let _ = self.sender.send(LaneRequest::Stop).await;
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

async fn lane_loop(
    shared: Arc<Shared>,
    owner: sutra_store::Owner,
    mut live: Arc<Live>,
    mut requests: mpsc::Receiver<LaneRequest>,
    busy_since: Arc<AtomicU64>,
) {
    let mut next = None;
    loop {
        let request = match next.take() {
            Some(request) => request,
            None => match requests.recv().await {
                Some(request) => request,
                None => return,
            },
        };
        match request {
            LaneRequest::Activate(view, done) => {
                live = view;
                let _ = done.send(());
            }
            LaneRequest::Stop => return,
            LaneRequest::Work(first) => {
                let (members, after) = gather(&shared, first, &mut requests).await;
                next = after;
                busy_since.store(epoch_millis().max(1), Ordering::Relaxed);
                let stepper = Stepper {
                    shared: &shared,
                    owner: &owner,
                    live: &live,
                };
                // A panicking member is undone and answered by the group; the lane survives
                // whatever else escapes (one bad instance must not stop every other one).
                let _ = AssertUnwindSafe(group::run(&stepper, members))
                    .catch_unwind()
                    .await;
                busy_since.store(0, Ordering::Relaxed);
            }
        }
    }
}

/// The members of the next group: `first`, and the work queued behind it, up to the group's
/// size, waiting at most the group's window for more. A request that is not work ends the
/// group and is handed back, to be handled after it in order.
async fn gather(
    shared: &Shared,
    first: Member,
    requests: &mut mpsc::Receiver<LaneRequest>,
) -> (Vec<Member>, Option<LaneRequest>) {
    let max = shared.config.group_max.max(1);
    let window = shared.config.group_window.unsigned_abs();
    let closes = tokio::time::Instant::now() + window;
    let mut members = vec![first];
    while members.len() < max {
        let queued = match requests.try_recv() {
            Ok(request) => Some(request),
            Err(_) if window.is_zero() => None,
            Err(_) => tokio::time::timeout_at(closes, requests.recv())
                .await
                .ok()
                .flatten(),
        };
        match queued {
            Some(LaneRequest::Work(member)) => members.push(member),
            Some(other) => return (members, Some(other)),
            None => break,
        }
    }
    (members, None)
}

fn epoch_millis() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as u64)
}
