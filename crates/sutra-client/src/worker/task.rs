//! What a handler sees and returns: a typed [`Task`], and a [`TaskError`] that says whether the
//! failure is worth retrying.
//!
//! Handlers are typed; the poll loop is not. [`erase`] is the one place where the task's JSON
//! input becomes the handler's type and its output becomes JSON again, so that a mismatch has
//! one well-defined outcome.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::types::{LockedTask, TaskFailure};

/// Codes a worker reports for failures it detects itself, rather than its handlers.
pub mod codes {
    /// The task's input does not deserialize into the handler's input type. Reported as a
    /// business error: the same input would fail the same way on every retry.
    pub const INPUT_INVALID: &str = "WORKER.INPUT.INVALID";
    /// The handler's output does not serialize to JSON. Retried: it is the worker's bug, and a
    /// fixed worker can still take the task.
    pub const OUTPUT_INVALID: &str = "WORKER.OUTPUT.INVALID";
    /// The code of [`TaskError::retry`](super::TaskError::retry).
    pub const HANDLER_FAILED: &str = "WORKER.HANDLER.FAILED";
    /// The handler panicked. Retried.
    pub const HANDLER_PANICKED: &str = "WORKER.HANDLER.PANICKED";
    /// The server sent a task of a topic this worker has no handler for. Retried.
    pub const TOPIC_UNKNOWN: &str = "WORKER.TOPIC.UNKNOWN";
}

/// A task handed to a handler, with its input deserialized.
#[derive(Debug, Clone, PartialEq)]
pub struct Task<I> {
    pub id: String,
    pub topic: String,
    /// The instance waiting for this task.
    pub instance: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    pub input: I,
}

impl<I: DeserializeOwned> Task<I> {
    fn decode(task: LockedTask) -> Result<Task<I>, TaskError> {
        let input = serde_json::from_value(task.input).map_err(|error| {
            TaskError::business(
                codes::INPUT_INVALID,
                format!(
                    "the input of task {} does not fit the `{}` handler's input type: {error}",
                    task.id, task.topic
                ),
            )
        })?;
        Ok(Task {
            id: task.id,
            topic: task.topic,
            instance: task.instance,
            attempt: task.attempt,
            input,
        })
    }
}

/// Why a handler did not produce an output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {message}")]
pub struct TaskError {
    code: String,
    message: String,
    retry: bool,
}

impl TaskError {
    /// A transient failure (a timeout, a service that is down): the task is retried with its
    /// node's backoff, and fails the instance once out of retries.
    pub fn retry(message: impl Into<String>) -> TaskError {
        TaskError::retry_as(codes::HANDLER_FAILED, message)
    }

    /// A business error (insufficient funds, an unknown account): not retried. The flow takes
    /// the node's `on-error` path with `vars.error = {code, message}`, or fails without one.
    pub fn business(code: impl Into<String>, message: impl Into<String>) -> TaskError {
        TaskError {
            code: code.into(),
            message: message.into(),
            retry: false,
        }
    }

    pub(crate) fn retry_as(code: &str, message: impl Into<String>) -> TaskError {
        TaskError {
            code: code.to_owned(),
            message: message.into(),
            retry: true,
        }
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn is_retry(&self) -> bool {
        self.retry
    }

    pub(crate) fn to_failure(&self) -> TaskFailure {
        TaskFailure {
            code: self.code.clone(),
            message: self.message.clone(),
        }
    }
}

/// A handler's future, with input and output as JSON.
pub(crate) type Running = Pin<Box<dyn Future<Output = Result<Value, TaskError>> + Send>>;

/// A handler as the poll loop holds it.
pub(crate) type Handler = Arc<dyn Fn(LockedTask) -> Running + Send + Sync>;

/// Wraps a typed handler so that it takes and gives JSON.
pub(crate) fn erase<I, O, F, Fut>(handler: F) -> Handler
where
    I: DeserializeOwned + Send + 'static,
    O: Serialize + Send + 'static,
    F: Fn(Task<I>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, TaskError>> + Send + 'static,
{
    Arc::new(move |locked: LockedTask| -> Running {
        match Task::decode(locked) {
            Ok(task) => {
                let running = handler(task);
                Box::pin(async move { encode(running.await?) })
            }
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    })
}

/// The handler for a topic this worker did not ask for: hands the task back for another worker.
pub(crate) fn unknown_topic() -> Handler {
    Arc::new(|task: LockedTask| -> Running {
        let message = format!("this worker has no handler for topic `{}`", task.topic);
        Box::pin(std::future::ready(Err(TaskError::retry_as(
            codes::TOPIC_UNKNOWN,
            message,
        ))))
    })
}

fn encode<O: Serialize>(output: O) -> Result<Value, TaskError> {
    serde_json::to_value(output).map_err(|error| {
        TaskError::retry_as(
            codes::OUTPUT_INVALID,
            format!("the handler's output is not JSON: {error}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Deserialize)]
    struct Debit {
        account: String,
        amount: u64,
    }

    fn locked(input: Value) -> LockedTask {
        LockedTask {
            id: "i-1:2".into(),
            topic: "debit-account".into(),
            instance: "i-1".into(),
            input,
            attempt: 1,
            lock_token: "t".into(),
            lock_expires_at: "2026-01-01T00:00:00Z".into(),
            extra: Default::default(),
        }
    }

    fn debit() -> Handler {
        erase(|task: Task<Debit>| async move {
            if task.input.amount > 100 {
                return Err(TaskError::business("FUNDS.INSUFFICIENT", "too much"));
            }
            Ok(json!({"debited": task.input.account, "attempt": task.attempt}))
        })
    }

    fn run(handler: &Handler, input: Value) -> Result<Value, TaskError> {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(handler(locked(input)))
    }

    #[test]
    fn typed_input_and_output_cross_the_json_boundary() {
        let output = run(&debit(), json!({"account": "a-1", "amount": 5})).unwrap();
        assert_eq!(output, json!({"debited": "a-1", "attempt": 1}));
    }

    #[test]
    fn input_that_does_not_fit_is_a_business_error_never_retried() {
        let error = run(&debit(), json!({"account": "a-1"})).unwrap_err();
        assert_eq!(error.code(), codes::INPUT_INVALID);
        assert!(!error.is_retry());
        assert!(error.message().contains("amount"), "{error}");
        assert!(error.message().contains("debit-account"), "{error}");
    }

    #[test]
    fn a_handlers_business_error_passes_through_unchanged() {
        let error = run(&debit(), json!({"account": "a-1", "amount": 500})).unwrap_err();
        assert_eq!(
            error,
            TaskError::business("FUNDS.INSUFFICIENT", "too much"),
            "{error}"
        );
    }

    #[test]
    fn output_that_is_not_json_is_retried() {
        let handler = erase(|_: Task<Value>| async {
            // JSON object keys must be strings.
            Ok(HashMap::from([((1, 2), "pair")]))
        });
        let error = run(&handler, json!(null)).unwrap_err();
        assert_eq!(error.code(), codes::OUTPUT_INVALID);
        assert!(error.is_retry());
    }

    #[test]
    fn every_worker_code_is_documented() {
        let doc = include_str!("../../../../docs/errors.md");
        for code in [
            codes::INPUT_INVALID,
            codes::OUTPUT_INVALID,
            codes::HANDLER_FAILED,
            codes::HANDLER_PANICKED,
            codes::TOPIC_UNKNOWN,
        ] {
            assert!(
                doc.contains(&format!("| `{code}` |")),
                "docs/errors.md lacks {code}"
            );
        }
    }

    #[test]
    fn retry_errors_carry_the_handler_failed_code() {
        let error = TaskError::retry("the ledger timed out");
        assert!(error.is_retry());
        assert_eq!(
            error.to_failure(),
            TaskFailure {
                code: codes::HANDLER_FAILED.into(),
                message: "the ledger timed out".into()
            }
        );
    }
}
