//! The engine's errors, which the server maps to coded answers at the HTTP edge.

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The instance's claim is held by another owner. Retry-safe: nothing was written.
    #[error("the instance is busy: another step holds its claim; retry shortly")]
    Busy,
    #[error("no instance {0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidState(String),
    /// The event answers a park the instance no longer holds; nothing was applied.
    #[error("{0}")]
    Stale(String),
    #[error("the deployment version {0} is not loaded on this replica")]
    Unpinned(String),
    #[error(transparent)]
    Store(#[from] sutra_store::Error),
    #[error("the step failed unexpectedly (a bug); its claim was released")]
    Panicked,
    #[error("the engine is shutting down")]
    Closed,
    #[error("no task {0}")]
    TaskNotFound(String),
    /// The worker's lock token does not hold the task; nothing was written.
    #[error("{0}")]
    LockLost(String),
    /// The instance's stored snapshot cannot be decoded, or its row is marked failed because it
    /// could not be (docs/decisions/0082): nothing was written. It runs again once its row is
    /// repaired and it is restored.
    #[error(
        "the instance's stored snapshot cannot be read ({0}): it stays failed until its row's \
         snapshot is repaired and the instance is restored"
    )]
    Unreadable(String),
    /// A migration that does not fit the instance (its map, its target version); nothing was
    /// written.
    #[error("{0}")]
    Unmigratable(String),
}
