//! One task, from lock to report: run its handler, keep its lock alive meanwhile, and tell the
//! server how it ended.
//!
//! The handler runs in a Tokio task of its own so that a panic is caught at the join and
//! becomes a retryable failure instead of a dead worker. The lock is extended at half the
//! remaining period, so one failed extend still leaves time for another before it expires.
//!
//! A completion asks for the worker's next task unless the worker is stopping; the task the
//! server answers with it is the execution's next, in the same slot.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinError;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::backoff::Backoff;
use super::completer::Completer;
use super::task::{Handler, TaskError, codes};
use crate::client::Client;
use crate::error::{ApiError, TASK_LOCK_LOST};
use crate::types::{LockedTask, TaskFailure};

/// How often a report is tried when the server is away, and how long between tries: short,
/// because the lock is running out meanwhile and the task is redone after it anyway.
const REPORT_ATTEMPTS_MAX: u32 = 4;
const REPORT_BACKOFF_FIRST: Duration = Duration::from_millis(250);
const REPORT_BACKOFF_MAX: Duration = Duration::from_secs(2);

/// What the worker knows about one locked task.
pub(crate) struct Execution {
    pub(crate) client: Client,
    /// Where its completion goes, to be sent in a batch with others'.
    pub(crate) completer: Completer,
    pub(crate) task: LockedTask,
    /// The lock period asked for at the poll, and used for every extension.
    pub(crate) lock: Duration,
    /// When the poll answered: the lock started no later than this.
    pub(crate) locked_at: Instant,
    /// Set once the worker stops: a completion then asks for no next task.
    pub(crate) stopping: watch::Receiver<bool>,
}

/// How the handler ended, as far as the server needs to know.
enum Ending {
    Finished(Result<Value, TaskError>),
    /// The worker stopped before the handler finished.
    Abandoned,
}

impl Execution {
    /// Runs `handler` on the task and reports the result, unless `abandon` fires first, in which
    /// case the handler is aborted and the task handed back for another worker. Returns the
    /// execution of the task the server locked for this worker with the completion, if it did.
    pub(crate) async fn run(
        self,
        handler: Handler,
        mut abandon: watch::Receiver<bool>,
    ) -> Option<Execution> {
        let (ending, lock_lost) = self.ending(handler, &mut abandon).await;
        if lock_lost {
            info!("dropping the result: the lock was lost, so another worker may have the task");
            return None;
        }
        let report = match ending {
            Ending::Finished(Ok(output)) => Report::Complete(output),
            Ending::Finished(Err(error)) => Report::Fail(error),
            Ending::Abandoned => Report::Release,
        };
        let next = self.report(report).await?;
        Some(Execution {
            task: next,
            locked_at: Instant::now(),
            ..self
        })
    }

    /// Runs the handler while keeping the lock; how it ended, and whether the lock was lost.
    async fn ending(
        &self,
        handler: Handler,
        abandon: &mut watch::Receiver<bool>,
    ) -> (Ending, bool) {
        let task = self.task.clone();
        let mut running = tokio::spawn(async move { handler(task).await });
        let keeper = self.keep_lock();
        tokio::pin!(keeper);
        let mut lock_lost = false;
        let ending = loop {
            tokio::select! {
                joined = &mut running => break Ending::Finished(joined.unwrap_or_else(failure_of)),
                () = &mut keeper, if !lock_lost => lock_lost = true,
                Ok(_) = abandon.wait_for(|abandoned| *abandoned) => {
                    running.abort();
                    break Ending::Abandoned;
                }
            }
        };
        (ending, lock_lost)
    }

    /// Extends the lock while the handler runs; returns only if the server says it is lost.
    async fn keep_lock(&self) {
        let mut expires = self.locked_at + self.lock;
        loop {
            let remaining = expires.saturating_duration_since(Instant::now());
            tokio::time::sleep((remaining / 2).max(self.lock / 8)).await;
            let sent = Instant::now();
            match self
                .client
                .extend(&self.task.id, &self.task.lock_token, self.lock)
                .await
            {
                Ok(_) => {
                    debug!("lock extended");
                    expires = sent + self.lock;
                }
                Err(error) if error.code() == Some(TASK_LOCK_LOST) => {
                    warn!(%error, "the lock was lost while the handler ran; its result will be dropped");
                    return;
                }
                Err(error) => warn!(%error, "could not extend the lock; trying again"),
            }
        }
    }

    /// Tells the server how the task ended, retrying briefly while the server is away; returns
    /// the next task the server locked for this worker with a completion.
    async fn report(&self, report: Report) -> Option<LockedTask> {
        let mut backoff = Backoff::new(REPORT_BACKOFF_FIRST, REPORT_BACKOFF_MAX);
        for attempt in 1..=REPORT_ATTEMPTS_MAX {
            let error = match self.send(&report).await {
                Ok(Sent { state, next }) => {
                    debug!(
                        state,
                        next = next.as_ref().map(|task| task.id.as_str()),
                        "{}",
                        report.describe()
                    );
                    return next;
                }
                Err(error) => error,
            };
            if error.code() == Some(TASK_LOCK_LOST) {
                warn!(%error, "{} refused: the lock was lost; the result is dropped", report.describe());
                return None;
            }
            if !error.is_retryable() || attempt == REPORT_ATTEMPTS_MAX {
                warn!(%error, "{} failed; the task runs again once its lock expires", report.describe());
                return None;
            }
            debug!(%error, attempt, "{} failed; trying again", report.describe());
            tokio::time::sleep(backoff.delay()).await;
        }
        None
    }

    /// A completion goes in a batch with other executions', asking for the next task unless the
    /// worker is stopping; a failure or a hand-back goes alone, as the server batches only
    /// completions, the report nearly every task ends with (decision 0025).
    async fn send(&self, report: &Report) -> Result<Sent, Arc<ApiError>> {
        let (id, token) = (&self.task.id, &self.task.lock_token);
        match report {
            Report::Complete(output) => {
                let take_next = !*self.stopping.borrow();
                let next = self
                    .completer
                    .complete(id, token, output, take_next)
                    .await?;
                let state = "completed".to_owned();
                Ok(Sent { state, next })
            }
            Report::Fail(error) => {
                let failure: TaskFailure = error.to_failure();
                let answer = self
                    .client
                    .fail(id, token, &failure, error.is_retry())
                    .await?;
                Ok(Sent::alone(answer.state))
            }
            Report::Release => Ok(Sent::alone(self.client.release(id, token).await?.state)),
        }
    }
}

/// What the server answered a report: the task's state, and the next task it locked for this
/// worker with a completion.
struct Sent {
    state: String,
    next: Option<LockedTask>,
}

impl Sent {
    fn alone(state: String) -> Sent {
        Sent { state, next: None }
    }
}

enum Report {
    Complete(Value),
    Fail(TaskError),
    /// The worker stopped before the handler finished: the task goes back, its attempt unspent.
    Release,
}

impl Report {
    fn describe(&self) -> String {
        match self {
            Report::Complete(_) => "completing the task".to_owned(),
            Report::Release => "handing the task back".to_owned(),
            Report::Fail(error) if error.is_retry() => {
                format!("failing the task for a retry ({error})")
            }
            Report::Fail(error) => format!("failing the task with a business error ({error})"),
        }
    }
}

/// A handler that did not return: it panicked (or was cancelled, which only `run` does).
fn failure_of(error: JoinError) -> Result<Value, TaskError> {
    let message = if error.is_panic() {
        format!(
            "the handler panicked: {}",
            panic_message(error.into_panic())
        )
    } else {
        "the handler was cancelled".to_owned()
    };
    warn!("{message}");
    Err(TaskError::retry_as(codes::HANDLER_PANICKED, message))
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(message) => *message,
        Err(payload) => match payload.downcast::<&'static str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => "(a panic without a message)".to_owned(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_message_is_kept_whether_static_or_formatted() {
        assert_eq!(panic_message(Box::new("boom")), "boom");
        assert_eq!(panic_message(Box::new(format!("boom {}", 2))), "boom 2");
        assert_eq!(panic_message(Box::new(7)), "(a panic without a message)");
    }

    #[tokio::test]
    async fn a_panicking_handler_becomes_a_retryable_failure() {
        let joined = tokio::spawn(async { panic!("account service exploded") }).await;
        let error = failure_of(joined.unwrap_err()).unwrap_err();
        assert_eq!(error.code(), codes::HANDLER_PANICKED);
        assert!(error.is_retry());
        assert!(error.message().contains("account service exploded"));
    }
}
