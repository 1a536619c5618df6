//! A client for a Sutra server: typed calls to its HTTP API ([`Client`]), and a [`Worker`] that
//! runs handlers for its external tasks (SPEC §5.5).
//!
//! This crate is a public API boundary. It speaks the wire format as plain data and in a
//! worker's vocabulary (tasks, topics, locks), and depends on no other Sutra crate but
//! `sutra-wire`, the API's vocabulary that the server writes with: a team that writes workers
//! links this and nothing of the engine, and the engine can change inside without breaking them.
//!
//! A worker in a few lines:
//!
//! ```no_run
//! use serde::{Deserialize, Serialize};
//! use sutra_client::{Client, Task, TaskError, Worker};
//!
//! #[derive(Deserialize)]
//! struct Credit { account: String, amount: u64 }
//!
//! #[derive(Serialize)]
//! struct Credited { reference: String }
//!
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! let client = Client::new("http://127.0.0.1:7480")?;
//! Worker::new(client, "ledger-1")
//!     .handler("credit-account", |task: Task<Credit>| async move {
//!         let reference = post_to_ledger(&task.input).await
//!             .map_err(|error| TaskError::retry(error.to_string()))?;
//!         Ok(Credited { reference })
//!     })
//!     .run(async { tokio::signal::ctrl_c().await.ok(); })
//!     .await;
//! # Ok(())
//! # }
//! # async fn post_to_ledger(_: &Credit) -> std::io::Result<String> { Ok(String::new()) }
//! ```

mod client;
mod duration;
mod error;
mod types;
mod worker;

pub use client::{Client, install_tls_provider};
pub use error::{ApiError, InvalidUrl, TASK_LOCK_LOST, TransportError};
pub use types::{
    Accepted, BulkAnswer, BulkBody, BulkFilter, BulkResult, COMPLETE_BATCH_MAX, CloudEvent,
    CompleteItem, Deployment, Diagnostic, Extra, Failure, HistoryEvent, Instance, InstanceQuery,
    InstanceSummary, ItemResult, Lease, Leases, LockExtended, LockedTask, OutboxMessage, Page,
    PollRequest, Problem, Readiness, Retirement, Schedule, Schedules, Sent, StatusChange,
    TaskFailure, TaskQuery, TaskState, TaskSummary, Token, Violation,
};
pub use worker::{Task, TaskError, Worker, codes};
