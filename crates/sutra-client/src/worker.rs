//! [`Worker`]: runs handlers for a server's external tasks (SPEC §5.5).
//!
//! One loop polls for exactly as many tasks as there are free slots, so the worker never holds a
//! lock on a task it has no capacity to start: whatever it does not take, another worker can.
//! Each task then runs on its own (see `execution`), holding its slot until it has reported.
//! Completions are sent in batches (see `completer`), failures and lock extensions alone. A
//! completion asks for the worker's next task, and a task the server locks for the worker with
//! it runs in the same slot at once: a flow's next task needs no poll (decision 0038).
//!
//! Shutdown stops polling at once, dropping a long poll in flight, lets running handlers finish
//! within a grace period, and hands what is still running back to the server as a retryable
//! failure, so that another worker takes it now rather than when its lock expires.

mod backoff;
mod completer;
mod execution;
mod task;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument, info, info_span, warn};

pub use task::{Task, TaskError, codes};

use crate::client::Client;
use crate::error::ApiError;
use crate::types::{LockedTask, PollRequest, Take};
use backoff::Backoff;
use completer::Completer;
use execution::Execution;
use task::Handler;

const CONCURRENCY_DEFAULT: u32 = 8;
const LOCK_DEFAULT: Duration = Duration::from_secs(60);
const POLL_WAIT_DEFAULT: Duration = Duration::from_secs(20);
/// Shorter than the usual 30 s a container orchestrator allows between SIGTERM and SIGKILL, so
/// that the hand-back still happens before the process is killed.
const GRACE_DEFAULT: Duration = Duration::from_secs(10);
const POLL_BACKOFF_FIRST: Duration = Duration::from_millis(250);
const POLL_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Polls a server for tasks of the topics it has handlers for, and runs them.
///
/// ```no_run
/// use serde::{Deserialize, Serialize};
/// use sutra_client::{Client, Task, TaskError, Worker};
///
/// #[derive(Deserialize)]
/// struct Debit { account: String, amount: u64 }
///
/// #[derive(Serialize)]
/// struct Debited { balance: u64 }
///
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// let client = Client::new("http://127.0.0.1:7480")?;
/// Worker::new(client, "ledger-worker-1")
///     .handler("debit-account", |task: Task<Debit>| async move {
///         if task.input.amount > 1_000 {
///             return Err(TaskError::business("FUNDS.INSUFFICIENT", "not enough money"));
///         }
///         Ok(Debited { balance: 1_000 - task.input.amount })
///     })
///     .concurrency(8)
///     .run(async { tokio::signal::ctrl_c().await.ok(); })
///     .await;
/// # Ok(())
/// # }
/// ```
pub struct Worker {
    client: Client,
    id: String,
    handlers: HashMap<String, Handler>,
    concurrency: u32,
    lock: Duration,
    poll_wait: Duration,
    grace: Duration,
}

/// What every execution of a running worker shares.
struct Running<'a> {
    handlers: &'a Arc<HashMap<String, Handler>>,
    abandoned: &'a watch::Receiver<bool>,
    /// Set once the worker stops polling: its completions ask for no next task.
    stopping: &'a watch::Receiver<bool>,
    completer: &'a Completer,
}

/// Tasks one poll locked, with the slots reserved for them.
struct Polled {
    tasks: Vec<LockedTask>,
    permits: OwnedSemaphorePermit,
    at: Instant,
}

impl Worker {
    /// A worker named `id` (shown as the lock holder in `sutra tasks list`), with no handlers
    /// yet.
    pub fn new(client: Client, id: impl Into<String>) -> Worker {
        Worker {
            client,
            id: id.into(),
            handlers: HashMap::new(),
            concurrency: CONCURRENCY_DEFAULT,
            lock: LOCK_DEFAULT,
            poll_wait: POLL_WAIT_DEFAULT,
            grace: GRACE_DEFAULT,
        }
    }

    /// Runs `handler` for the tasks of `topic`, with the task's input deserialized into `I` and
    /// the handler's output serialized as the task's result.
    ///
    /// # Panics
    /// If `topic` has a handler already.
    pub fn handler<I, O, F, Fut>(mut self, topic: impl Into<String>, handler: F) -> Worker
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        F: Fn(Task<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
    {
        let topic = topic.into();
        assert!(
            !self.handlers.contains_key(&topic),
            "topic `{topic}` has two handlers"
        );
        self.handlers.insert(topic, task::erase(handler));
        self
    }

    /// How many handlers may run at once (default 8).
    ///
    /// # Panics
    /// If `tasks` is zero.
    pub fn concurrency(mut self, tasks: u32) -> Worker {
        assert!(tasks > 0, "a worker needs room for at least one task");
        self.concurrency = tasks;
        self
    }

    /// How long a task stays locked for this worker without word from it (default one minute).
    /// The worker extends the lock while a handler runs, so this bounds how long a crashed
    /// worker's task waits for someone else, not how long a handler may take.
    pub fn lock(mut self, lock: Duration) -> Worker {
        self.lock = lock;
        self
    }

    /// How long one poll waits on the server for a task to arrive (default 20 s; the server caps
    /// it at 60 s).
    pub fn poll_wait(mut self, wait: Duration) -> Worker {
        self.poll_wait = wait;
        self
    }

    /// How long running handlers may take to finish after shutdown is asked for (default 10 s).
    pub fn grace(mut self, grace: Duration) -> Worker {
        self.grace = grace;
        self
    }

    /// Polls and runs tasks until `shutdown` completes, then stops gracefully. Poll failures
    /// (the server is away) are logged and retried with backoff; they never end the loop.
    ///
    /// # Panics
    /// If the worker has no handler, or is not run inside a Tokio runtime.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        assert!(
            !self.handlers.is_empty(),
            "a worker needs at least one handler"
        );
        let mut topics: Vec<String> = self.handlers.keys().cloned().collect();
        topics.sort();
        let slots = Arc::new(Semaphore::new(self.concurrency as usize));
        let (abandon, abandoned) = watch::channel(false);
        let mut executions = JoinSet::new();
        let mut backoff = Backoff::new(POLL_BACKOFF_FIRST, POLL_BACKOFF_MAX);
        let take = Take {
            worker: self.id.clone(),
            topics: topics.clone(),
            lock: Some(crate::duration::iso8601(self.lock)),
        };
        let (completer, sending) = Completer::start(self.client.clone(), take);
        let (stop, stopping) = watch::channel(false);
        let handlers = Arc::new(self.handlers.clone());
        tokio::pin!(shutdown);
        info!(worker = %self.id, ?topics, concurrency = self.concurrency, "worker started");
        loop {
            let polled = tokio::select! {
                biased;
                () = &mut shutdown => break,
                polled = self.poll(&topics, &slots) => polled,
            };
            match polled {
                Ok(polled) => {
                    backoff.reset();
                    let running = Running {
                        handlers: &handlers,
                        abandoned: &abandoned,
                        stopping: &stopping,
                        completer: &completer,
                    };
                    self.start(polled, &mut executions, running);
                }
                Err(error) => {
                    let delay = backoff.delay();
                    warn!(%error, ?delay, "poll failed; polling again after a delay");
                    tokio::select! {
                        biased;
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(delay) => {}
                    }
                }
            }
            while executions.try_join_next().is_some() {}
        }
        stop.send_replace(true);
        self.drain(executions, abandon).await;
        // Every execution has had its answer, so the sending loop has nothing left to send.
        drop(completer);
        if let Err(error) = sending.await {
            warn!(%error, "the completions' sending loop ended abnormally");
        }
        info!(worker = %self.id, "worker stopped");
    }

    /// Waits for a free slot, then asks for as many tasks as there are free slots.
    async fn poll(&self, topics: &[String], slots: &Arc<Semaphore>) -> Result<Polled, ApiError> {
        let mut permits = Arc::clone(slots)
            .acquire_owned()
            .await
            .expect("the worker never closes its semaphore");
        let free = u32::try_from(slots.available_permits()).expect("at most `concurrency`");
        if let Ok(more) = Arc::clone(slots).try_acquire_many_owned(free) {
            permits.merge(more);
        }
        let request = PollRequest {
            worker: self.id.clone(),
            topics: topics.to_vec(),
            max: u32::try_from(permits.num_permits()).expect("at most `concurrency`"),
            lock: self.lock,
            wait: self.poll_wait,
        };
        let tasks = self.client.poll(&request).await?;
        Ok(Polled {
            tasks,
            permits,
            at: Instant::now(),
        })
    }

    /// Starts one execution per polled task, each holding one slot until it and every task
    /// locked for it with a completion have ended; unused slots are freed.
    fn start(&self, polled: Polled, executions: &mut JoinSet<()>, running: Running<'_>) {
        let Polled {
            tasks,
            mut permits,
            at,
        } = polled;
        for task in tasks {
            let permit = permits.split(1);
            if permit.is_none() {
                warn!(task = %task.id, "the server sent more tasks than asked for; running it anyway");
            }
            let execution = Execution {
                client: self.client.clone(),
                completer: running.completer.clone(),
                task,
                lock: self.lock,
                locked_at: at,
                stopping: running.stopping.clone(),
            };
            let handlers = Arc::clone(running.handlers);
            let abandoned = running.abandoned.clone();
            executions.spawn(async move {
                let _slot = permit;
                let mut next = Some(execution);
                while let Some(execution) = next {
                    let task = &execution.task;
                    let span = info_span!("task", id = %task.id, topic = %task.topic, instance = %task.instance, attempt = task.attempt);
                    let handler = match handlers.get(&task.topic) {
                        Some(handler) => Arc::clone(handler),
                        None => task::unknown_topic(),
                    };
                    next = execution
                        .run(handler, abandoned.clone())
                        .instrument(span)
                        .await;
                }
            });
        }
    }

    /// Lets running executions finish within the grace period, then tells the rest to hand
    /// their tasks back, and waits until they have.
    async fn drain(&self, mut executions: JoinSet<()>, abandon: watch::Sender<bool>) {
        if executions.is_empty() {
            return;
        }
        info!(in_flight = executions.len(), grace = ?self.grace, "stopping: letting running tasks finish");
        let all_finished = async { while executions.join_next().await.is_some() {} };
        if tokio::time::timeout(self.grace, all_finished)
            .await
            .is_err()
        {
            warn!(
                left = executions.len(),
                "grace period over: handing the remaining tasks back"
            );
            abandon.send_replace(true);
            while executions.join_next().await.is_some() {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use serde_json::Value;

    use super::*;

    /// A server that accepts connections and hangs up at once, counting them.
    async fn hanging_up_server() -> (String, Arc<AtomicU32>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let accepted = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&accepted);
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        (url, accepted)
    }

    #[tokio::test]
    async fn a_failing_poll_is_retried_and_never_ends_the_worker() {
        let (url, polls) = hanging_up_server().await;
        let worker = Worker::new(Client::new(&url).unwrap(), "w-1")
            .handler("debit-account", |_: Task<Value>| async { Ok(()) });
        let three_polls = async {
            while polls.load(Ordering::SeqCst) < 3 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(30), worker.run(three_polls))
            .await
            .expect("the worker kept polling and stopped when asked");
    }
}
