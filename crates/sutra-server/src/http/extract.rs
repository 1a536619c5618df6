//! What every route reads a request with: the body, bounded by `sutra.intake.max-bytes`, and the
//! query string and path parameters, each refused as problem+json naming what does not fit
//! rather than with axum's plain-text rejection.

use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Query};
use axum::http::StatusCode;
use axum::http::request::Parts;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use sutra_core::codes;

use super::Api;
use crate::problem::Problem;

pub(super) type Result<T, E = Problem> = std::result::Result<T, E>;

/// How much of an oversized body is read and dropped before answering 413. A server that
/// answers while the client is still sending makes most clients report a broken connection
/// instead of the answer; reading a bounded excess lets them see the 413 and its code.
const OVERSIZED_DRAIN_BYTES_MAX: usize = 16 << 20;

pub(super) async fn read_body(body: Body, max_bytes: usize) -> Result<axum::body::Bytes> {
    let mut chunks = body.into_data_stream();
    let (mut kept, mut seen) = (Vec::new(), 0usize);
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk.map_err(|e| {
            Problem::new(
                codes::INTAKE_DECODE,
                format!("the body could not be read: {e}"),
            )
        })?;
        seen = seen.saturating_add(chunk.len());
        if seen <= max_bytes {
            kept.extend_from_slice(&chunk);
        } else if seen > max_bytes.saturating_add(OVERSIZED_DRAIN_BYTES_MAX) {
            break;
        }
    }
    if seen > max_bytes {
        let detail = format!("the body is larger than {max_bytes} bytes (sutra.intake.max-bytes)");
        return Err(Problem::new(codes::INTAKE_VALIDATION, detail)
            .with_status(StatusCode::PAYLOAD_TOO_LARGE));
    }
    Ok(kept.into())
}

/// Reads a JSON body into `T`, naming the field at fault when it does not fit. A string holding
/// `\u0000` is refused wherever it is, as intake refuses it: the store could not keep it.
pub(super) async fn parse<T: DeserializeOwned>(api: &Api, body: Body) -> Result<T> {
    let bytes = read_body(body, api.max_bytes).await?;
    sutra_core::request::json(&bytes).map_err(invalid)
}

/// A query string, refused as problem+json (`SUTRA.API.REQUEST.INVALID`, naming what does not
/// fit) rather than with axum's plain-text answer.
pub(super) struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiQuery<T>> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(query)) => Ok(ApiQuery(query)),
            Err(rejection) => Err(invalid(format!(
                "the query string: {}",
                rejection.body_text()
            ))),
        }
    }
}

/// Path parameters, refused as problem+json when they do not fit (a version that is no number,
/// a percent-encoding that is not UTF-8) rather than with axum's plain-text answer.
pub(super) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiPath<T>> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(path)) => Ok(ApiPath(path)),
            Err(rejection) => Err(invalid(format!("the path: {}", rejection.body_text()))),
        }
    }
}

/// A request whose parameters or body do not fit (`SUTRA.API.REQUEST.INVALID`).
pub(super) fn invalid(detail: impl Into<String>) -> Problem {
    Problem::new(codes::API_REQUEST_INVALID, detail)
}
