//! Why a call failed: the server refused it (a problem with a stable code), or it never got an
//! answer (transport), or the answer was not what the API documents.
//!
//! The three are kept apart because callers act on them differently: a problem carries its own
//! retry advice, a transport failure is worth retrying with backoff, and an unexpected answer
//! usually means `--server` points at something that is not a Sutra server.

use crate::types::Problem;

/// The code a server answers when a lock token is wrong or expired, or the task is done already.
pub const TASK_LOCK_LOST: &str = "SUTRA.TASK.LOCK.LOST";

/// A failed API call.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The server refused the call (SPEC §4, §10). Boxed, so that a `Result` stays small on
    /// the happy path.
    #[error("{0}")]
    Problem(Box<Problem>),
    /// The call got no answer: the server is down or unreachable, or the connection broke.
    #[error(transparent)]
    Transport(TransportError),
    /// The server answered, but not in the shape the API documents.
    #[error("unexpected answer from {url} (HTTP {status}): {reason}")]
    Unexpected {
        url: String,
        status: u16,
        reason: String,
    },
}

impl ApiError {
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ApiError::Problem(problem) => Some(problem),
            _ => None,
        }
    }

    /// The problem's stable code, such as `SUTRA.INSTANCE.NOT_FOUND`.
    pub fn code(&self) -> Option<&str> {
        self.problem().map(|problem| problem.code.as_str())
    }

    /// Whether the same call may succeed if sent again unchanged. A lost answer may have been
    /// acted on, so only calls that are safe to repeat should be repeated.
    pub fn is_retryable(&self) -> bool {
        match self {
            ApiError::Problem(problem) => problem.retryable,
            ApiError::Transport(_) => true,
            ApiError::Unexpected { status, .. } => *status >= 500,
        }
    }
}

/// A request that got no answer.
#[derive(Debug, thiserror::Error)]
#[error("{}", self.describe())]
pub struct TransportError {
    url: String,
    #[source]
    source: reqwest::Error,
}

impl TransportError {
    pub(crate) fn new(url: &str, source: reqwest::Error) -> TransportError {
        TransportError {
            url: url.to_owned(),
            source,
        }
    }

    /// No connection could be made: nothing listens there, or the host cannot be resolved.
    pub fn is_connect(&self) -> bool {
        self.source.is_connect()
    }

    pub fn is_timeout(&self) -> bool {
        self.source.is_timeout()
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// The innermost cause ("Connection refused (os error 111)"): what a person can act on.
    pub fn reason(&self) -> String {
        let mut cause: &dyn std::error::Error = &self.source;
        while let Some(inner) = cause.source() {
            cause = inner;
        }
        cause.to_string()
    }

    fn describe(&self) -> String {
        if self.is_connect() {
            format!("cannot connect to {} ({})", self.url, self.reason())
        } else if self.is_timeout() {
            format!("{} did not answer in time", self.url)
        } else {
            format!("request to {} failed ({})", self.url, self.reason())
        }
    }
}

/// A server URL that cannot be used as one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{url}` is not a server URL: {reason}")]
pub struct InvalidUrl {
    pub url: String,
    pub reason: String,
}
