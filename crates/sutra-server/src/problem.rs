//! Errors as `application/problem+json` (RFC 9457), each with a stable Sutra code (SPEC §10).
//!
//! The status and the retry flag come from `sutra_core::codes`, never from the handler, so the
//! same code always means the same thing on the wire. The mapping from engine and store errors
//! lives here, one arm per variant and no catch-all, so that a new variant must be given a
//! meaning before it can reach a caller: a refusal says what happened, and its retry flag says
//! whether sending the same request again can help.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use sutra_core::codes::{self, Code};
use sutra_engine::Error as EngineError;
use sutra_store::Error as StoreError;

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

    pub fn code(&self) -> Code {
        self.0.code
    }

    /// The detail, with the extra member when there is one: what a log line says of it.
    pub fn explained(&self) -> String {
        match &self.0.extra {
            Some((name, value)) => format!("{} ({name}: {value})", self.0.detail),
            None => self.0.detail.clone(),
        }
    }

    /// Maps an engine error on a given path (`busy` is the path's CLAIM_HELD code).
    pub fn engine(error: EngineError, busy: Code) -> Problem {
        match error {
            EngineError::Busy => Problem::new(busy, error.to_string()),
            EngineError::NotFound(id) => {
                Problem::new(codes::INSTANCE_NOT_FOUND, format!("no instance {id}"))
            }
            EngineError::InvalidState(detail) => Problem::new(codes::ADMIN_STATE_INVALID, detail),
            // Only a relay or a delivery answers a park, and intake maps its own stale relay
            // (`SUTRA.RUNTIME.RELAY.STALE`); on an administrator's path the event found the
            // instance in a state that no longer allows it.
            EngineError::Stale(detail) => Problem::new(codes::ADMIN_STATE_INVALID, detail),
            EngineError::Store(store) => Problem::store(store, busy),
            EngineError::Panicked => Problem::new(codes::STEP_PANICKED, error.to_string()),
            EngineError::TaskNotFound(id) => {
                Problem::new(codes::TASK_NOT_FOUND, format!("no task {id}"))
            }
            EngineError::LockLost(detail) => Problem::new(codes::TASK_LOCK_LOST, detail),
            EngineError::Unmigratable(detail) => Problem::new(codes::MIGRATE_INVALID, detail),
            EngineError::Unreadable(_) => Problem::new(codes::STORE_CORRUPT, error.to_string()),
            EngineError::Unpinned(_) | EngineError::Closed => {
                Problem::new(codes::ENGINE_UNAVAILABLE, error.to_string())
            }
        }
    }

    /// Maps a store error on a given path (`busy` is the path's CLAIM_HELD code). Only
    /// `Unavailable` is the database being away; the others are answers about the data.
    pub fn store(error: StoreError, busy: Code) -> Problem {
        let detail = error.to_string();
        match error {
            // A claim swept from under a step rolled the step back, as a refusal to claim
            // writes nothing: the same request finds the instance free again shortly. A
            // duplicate start is the other delivery of the same message starting the instance;
            // the same request is then answered as that first delivery was.
            StoreError::ClaimHeld | StoreError::ClaimLost | StoreError::Duplicate(_) => {
                Problem::new(busy, detail)
            }
            StoreError::InstanceNotFound(_) => Problem::new(codes::INSTANCE_NOT_FOUND, detail),
            StoreError::TaskNotFound(_) => Problem::new(codes::TASK_NOT_FOUND, detail),
            StoreError::LockLost(_) => Problem::new(codes::TASK_LOCK_LOST, detail),
            StoreError::AliasTaken { .. } => Problem::new(codes::CORRELATION_ALIAS_TAKEN, detail),
            // Intake relays such a message; one that still gets here met a wait that came and
            // went while it was correlated: sent again, it is correlated afresh.
            StoreError::Waited { .. } => Problem::new(codes::RELAY_STALE, detail),
            StoreError::Unavailable(_) => Problem::new(codes::STORE_UNAVAILABLE, detail),
            StoreError::Corrupt(_) => Problem::new(codes::STORE_CORRUPT, detail),
        }
    }

    /// A read's store error: reads claim no instance, so no claim can be held against them.
    pub fn read(error: StoreError) -> Problem {
        Problem::store(error, codes::RESUME_CLAIM_HELD)
    }

    /// An answer that could not be rendered as JSON: the records it was built from hold what
    /// JSON cannot carry, which is corrupt data as far as a caller can tell — never a plausible
    /// body with the part left out.
    pub fn unrenderable(what: &str, error: serde_json::Error) -> Problem {
        Problem::new(
            codes::STORE_CORRUPT,
            format!("{what} cannot be rendered as JSON: {error}"),
        )
    }

    /// The status and the body this problem answers; a batched answer carries the body alone,
    /// as one item's result, so that it says what the same request sent alone would have.
    pub fn into_wire(self) -> (StatusCode, sutra_wire::Problem) {
        let problem = *self.0;
        let status = problem.status.unwrap_or_else(|| {
            StatusCode::from_u16(problem.code.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
        });
        let mut body = sutra_wire::Problem::new(
            problem.code.code,
            problem.code.title,
            status.as_u16(),
            problem.detail,
            problem.code.retryable,
        );
        if let Some((name, value)) = problem.extra {
            body.extensions.insert(name.to_owned(), value);
        }
        (status, body)
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let (status, body) = self.into_wire();
        respond(status, body)
    }
}

/// The response for a problem body: `application/problem+json`, and `Retry-After` on every
/// retryable conflict (a busy instance), so that a client knows when to come back.
pub fn respond(status: StatusCode, body: sutra_wire::Problem) -> Response {
    let retry_later = body.retryable && status == StatusCode::CONFLICT;
    let mut response = (status, Json(body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    if retry_later {
        headers.insert(
            header::RETRY_AFTER,
            HeaderValue::from_static(RETRY_AFTER_SECONDS),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The status, the `Retry-After` header and the body a problem answers.
    async fn answer(problem: Problem) -> (StatusCode, Option<String>, sutra_wire::Problem) {
        let response = problem.into_response();
        let status = response.status();
        let retry_after = response
            .headers()
            .get(header::RETRY_AFTER)
            .map(|value| value.to_str().unwrap().to_owned());
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, retry_after, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn a_claim_lost_at_commit_is_the_paths_claim_held_and_says_when_to_retry() {
        let lost = EngineError::Store(StoreError::ClaimLost);
        let (status, retry_after, body) =
            answer(Problem::engine(lost, codes::RESTORE_CLAIM_HELD)).await;
        assert_eq!(status, StatusCode::CONFLICT);
        assert_eq!(retry_after.as_deref(), Some(RETRY_AFTER_SECONDS));
        assert_eq!(body.code, codes::RESTORE_CLAIM_HELD.code);
        assert!(body.retryable);
        assert!(body.detail.contains("claim was lost"), "{}", body.detail);
    }

    #[tokio::test]
    async fn corrupt_data_is_a_500_that_no_retry_can_fix() {
        let corrupt = EngineError::Store(StoreError::Corrupt("a snapshot: expected value".into()));
        let (status, retry_after, body) =
            answer(Problem::engine(corrupt, codes::CANCEL_CLAIM_HELD)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(retry_after, None);
        assert_eq!(body.code, "SUTRA.STORE.CORRUPT");
        assert!(!body.retryable);
        assert!(body.detail.contains("a snapshot"), "{}", body.detail);
    }

    #[test]
    fn each_store_error_maps_to_what_it_means_and_only_unavailable_to_503() {
        let busy = codes::RESUME_CLAIM_HELD;
        let cases = [
            (StoreError::ClaimHeld, busy),
            (StoreError::ClaimLost, busy),
            (
                StoreError::InstanceNotFound("i".into()),
                codes::INSTANCE_NOT_FOUND,
            ),
            (StoreError::TaskNotFound("t".into()), codes::TASK_NOT_FOUND),
            (
                StoreError::LockLost("expired".into()),
                codes::TASK_LOCK_LOST,
            ),
            (
                StoreError::AliasTaken {
                    channel: "c".into(),
                    key: "k".into(),
                },
                codes::CORRELATION_ALIAS_TAKEN,
            ),
            (
                StoreError::Waited {
                    channel: "c".into(),
                    key: "k".into(),
                },
                codes::RELAY_STALE,
            ),
            (
                StoreError::Unavailable("down".into()),
                codes::STORE_UNAVAILABLE,
            ),
            (StoreError::Corrupt("bad row".into()), codes::STORE_CORRUPT),
        ];
        for (error, expected) in cases {
            let shown = error.to_string();
            assert_eq!(Problem::store(error, busy).code(), expected, "{shown}");
        }
    }

    #[tokio::test]
    async fn every_retryable_conflict_carries_retry_after_and_no_other_answer_does() {
        for code in codes::ALL {
            let (status, retry_after, body) = answer(Problem::new(*code, "x")).await;
            let retry_later = code.retryable && code.status == 409;
            assert_eq!(retry_after.is_some(), retry_later, "{code}");
            assert_eq!(
                (status.as_u16(), body.retryable),
                (code.status, code.retryable)
            );
        }
    }

    #[tokio::test]
    async fn an_unrenderable_record_is_a_problem_not_a_body() {
        let error = serde_json::from_str::<Value>("{").unwrap_err();
        let (status, _, body) =
            answer(Problem::unrenderable("the park of instance i", error)).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(body.code, codes::STORE_CORRUPT.code);
        assert!(
            body.detail
                .starts_with("the park of instance i cannot be rendered")
        );
    }
}
