//! Errors as `application/problem+json` (RFC 9457), each with a stable Sutra code (SPEC §10).
//!
//! The status and the retry flag come from `sutra_core::codes`, never from the handler, so the
//! same code always means the same thing on the wire.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sutra_core::codes::{self, Code};
use sutra_engine::Error as EngineError;

/// Boxed: handlers return `Result<_, Problem>`, and the happy path should not pay for the size
/// of the error.
#[derive(Debug)]
pub struct Problem(Box<Body>);

#[derive(Debug)]
pub struct Body {
    pub code: Code,
    /// Overrides the code's status where one code covers two HTTP cases (413 vs 422).
    pub status: Option<StatusCode>,
    pub detail: String,
    /// Extra members, such as `violations` or `diagnostics`.
    pub extra: Option<(&'static str, Value)>,
}

/// How long a client refused on a busy instance should wait before retrying, in seconds.
const RETRY_AFTER_SECONDS: &str = "1";

impl Problem {
    pub fn new(code: Code, detail: impl Into<String>) -> Problem {
        Problem(Box::new(Body {
            code,
            status: None,
            detail: detail.into(),
            extra: None,
        }))
    }

    pub fn with(mut self, name: &'static str, value: Value) -> Problem {
        self.0.extra = Some((name, value));
        self
    }

    pub fn with_status(mut self, status: StatusCode) -> Problem {
        self.0.status = Some(status);
        self
    }

    /// Maps an engine error on a given path (`busy` is the path's CLAIM_HELD code).
    pub fn engine(error: EngineError, busy: Code) -> Problem {
        match error {
            EngineError::Busy => Problem::new(busy, error.to_string()),
            EngineError::NotFound(id) => {
                Problem::new(codes::INSTANCE_NOT_FOUND, format!("no instance {id}"))
            }
            EngineError::InvalidState(detail) => Problem::new(codes::ADMIN_STATE_INVALID, detail),
            EngineError::Stale(detail) => Problem::new(codes::ADMIN_STATE_INVALID, detail),
            EngineError::Store(store) => Problem::new(codes::STORE_UNAVAILABLE, store.to_string()),
            EngineError::Panicked => Problem::new(codes::STEP_PANICKED, error.to_string()),
            EngineError::TaskNotFound(id) => {
                Problem::new(codes::TASK_NOT_FOUND, format!("no task {id}"))
            }
            EngineError::LockLost(detail) => Problem::new(codes::TASK_LOCK_LOST, detail),
            EngineError::Unpinned(_) | EngineError::Closed => {
                Problem::new(codes::ENGINE_UNAVAILABLE, error.to_string())
            }
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let problem = *self.0;
        let status = problem.status.unwrap_or_else(|| {
            StatusCode::from_u16(problem.code.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        });
        let mut body = json!({
            "type": format!("urn:sutra:error:{}", problem.code.code),
            "title": problem.code.title,
            "status": status.as_u16(),
            "code": problem.code.code,
            "detail": problem.detail,
            "retryable": problem.code.retryable,
        });
        if let Some((name, value)) = problem.extra {
            body[name] = value;
        }
        let mut response = (status, body.to_string()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        if problem.code.retryable && status == StatusCode::CONFLICT {
            headers.insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        response
    }
}
