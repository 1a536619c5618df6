//! The in-process tier: an [`Engine`] over a throwaway embedded store (`sqlite::memory:`), both on
//! a manual clock the test moves on, so that what the engine does about time — timers, backoffs,
//! locks, claim timeouts — is shown in milliseconds of real time and never crossed early. The
//! engine is driven through its public facade, as the server drives it.

#![allow(dead_code)] // Each test file uses its part of the harness.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::model::{Channel, Transport};
use sutra_core::snapshot::Status;
use sutra_core::step::Message;
use sutra_engine::intake::{Answer, Inbound};
use sutra_engine::tasks::PollRequest;
use sutra_engine::{Engine, EngineConfig};
use sutra_store::{
    Clock, InstanceRecord, LockedTask, ManualClock, OutboxRow, SendError, Sender, TaskPoll,
};

pub const TENANT: &str = "default";

/// How long a test waits in real time for the engine to act on what an advance made due: far
/// above what any step takes, so that only an engine that does not act fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// How long a test lets the engine run, in real time, before it says that something did not
/// happen. A slow machine can only make such a check pass when it should not, never fail.
pub const GRACE: Duration = Duration::from_millis(200);

/// An engine on a manual clock, with a flow deployed.
pub struct Harness {
    pub engine: Arc<Engine>,
    pub clock: ManualClock,
    pub sender: Arc<Outbound>,
}

impl Harness {
    /// Starts an engine with `config` on a fresh in-memory store and deploys `flows` for
    /// [`TENANT`].
    pub async fn start(flows: &str, config: EngineConfig) -> Harness {
        let clock = ManualClock::starting_at(start_of_time());
        let store = sutra_store_sqlite::open_with("sqlite::memory:", clock.clock())
            .await
            .expect("an in-memory store");
        let sender = Arc::new(Outbound::new(clock.clock()));
        let engine = Engine::start(
            Arc::new(store),
            config,
            Arc::clone(&sender) as Arc<dyn Sender>,
            clock.clock(),
        )
        .await
        .expect("the engine starts");
        engine
            .deploy(TENANT, flows)
            .await
            .unwrap_or_else(|error| panic!("the flows deploy: {error:?}"));
        Harness {
            engine,
            clock,
            sender,
        }
    }

    /// Moves the clock on by `by`.
    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Sends `data` on `channel` as message `id`; the instance it started or resumed.
    pub async fn send(&self, channel: &str, id: &str, data: Value) -> String {
        match self.engine.intake(inbound(channel, id, data)).await {
            Ok(Answer::Accepted {
                instance: Some(instance),
                ..
            }) => instance,
            other => panic!("message {id} on {channel} not taken: {other:?}"),
        }
    }

    pub async fn instance(&self, id: &str) -> InstanceRecord {
        self.engine
            .store()
            .instance(TENANT, id)
            .await
            .expect("the store reads")
            .unwrap_or_else(|| panic!("no instance {id}"))
    }

    /// Waits until the instance is `status`; the instance then.
    pub async fn wait_for_status(&self, id: &str, status: Status) -> InstanceRecord {
        eventually(&format!("{id} to be {status:?}"), || async {
            let record = self.instance(id).await;
            (record.snapshot.status == status).then_some(record)
        })
        .await
    }

    /// Polls `topic` for one task as `worker`, locking it for `lock`, without waiting.
    pub async fn poll_now(
        &self,
        worker: &str,
        topic: &str,
        lock: SignedDuration,
    ) -> Vec<LockedTask> {
        self.engine
            .poll_tasks(PollRequest {
                poll: TaskPoll {
                    tenant: TENANT.to_owned(),
                    worker: worker.to_owned(),
                    topics: vec![topic.to_owned()],
                    max: 1,
                    lock: Some(lock),
                },
                wait: SignedDuration::ZERO,
            })
            .await
            .expect("the poll is answered")
    }

    /// Waits until a poll of `topic` as `worker` locks a task; the task.
    pub async fn poll_one(&self, worker: &str, topic: &str, lock: SignedDuration) -> LockedTask {
        eventually(&format!("a task of {topic}"), || async {
            self.poll_now(worker, topic, lock).await.pop()
        })
        .await
    }
}

impl Harness {
    /// Runs `acting` to its end, moving the clock on 10 ms every 2 ms of real time meanwhile.
    /// Once a test has crossed a deadline, what the engine does next may itself wait on the
    /// clock — a loop that read the time just as the test advanced it sleeps from there — and
    /// only the test moves the clock on.
    pub async fn nudging<T>(&self, acting: impl Future<Output = T>) -> T {
        let mut acting = std::pin::pin!(acting);
        let began = Instant::now();
        loop {
            tokio::select! {
                acted = &mut acting => return acted,
                () = tokio::time::sleep(Duration::from_millis(2)) => {
                    assert!(began.elapsed() < PATIENCE, "waited {PATIENCE:?} for the engine to act");
                    self.advance(Duration::from_millis(10));
                }
            }
        }
    }
}

/// Where the manual clocks start: any fixed moment will do.
pub fn start_of_time() -> Timestamp {
    "2030-01-01T00:00:00Z".parse().expect("a timestamp")
}

/// `what` as soon as `look` finds it; fails after [`PATIENCE`] of real time.
pub async fn eventually<T, F, Fut>(what: &str, mut look: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let began = Instant::now();
    loop {
        if let Some(found) = look().await {
            return found;
        }
        assert!(began.elapsed() < PATIENCE, "waited {PATIENCE:?} for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The outbox's transport: records when each send was tried, by the engine's clock, and fails as
/// many as it is told to.
pub struct Outbound {
    clock: Clock,
    failing: Mutex<usize>,
    sends: Mutex<Vec<Timestamp>>,
}

impl Outbound {
    fn new(clock: Clock) -> Outbound {
        Outbound {
            clock,
            failing: Mutex::new(0),
            sends: Mutex::new(Vec::new()),
        }
    }

    /// Fails the next `sends` sends.
    pub fn fail_next(&self, sends: usize) {
        *self.failing.lock().unwrap() = sends;
    }

    /// When each send was tried.
    pub fn sends(&self) -> Vec<Timestamp> {
        self.sends.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Sender for Outbound {
    async fn send(&self, _channel: &Channel, _row: &OutboxRow) -> Result<(), SendError> {
        self.sends.lock().unwrap().push(self.clock.now());
        let mut failing = self.failing.lock().unwrap();
        if *failing == 0 {
            return Ok(());
        }
        *failing -= 1;
        Err(SendError("the receiver is down".to_owned()))
    }
}

/// Message `id` carrying `data` on `channel`, as HTTP intake decodes it.
pub fn inbound(channel: &str, id: &str, data: Value) -> Inbound {
    Inbound {
        tenant: TENANT.to_owned(),
        channel: channel.to_owned(),
        message: Message {
            id: id.to_owned(),
            kind: "test".to_owned(),
            source: "test".to_owned(),
            subject: None,
            time: None,
            data,
        },
        via: Transport::Http,
    }
}
