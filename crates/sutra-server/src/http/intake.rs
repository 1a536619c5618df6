//! A channel's messages over HTTP (SPEC §5.1): intake of a CloudEvent, and the answer its `ack`
//! asks for. [`intake_problem`] says what each intake refusal means, for this route and for the
//! broker consumers alike.

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sutra_core::codes;
use sutra_core::model::Transport;
use sutra_core::step::Reply;
use sutra_engine::Error as EngineError;
use sutra_engine::intake::{Answer, Inbound, IntakeError};
use sutra_wire::Extra;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use super::extract::{ApiPath, Result, read_body};
use crate::auth::Caller;
use crate::cloudevents;
use crate::openapi::{
    BadRequest, CloudEvent, Conflict, NotFound, PayloadTooLarge, TooMany, Unavailable,
    Unprocessable,
};
use crate::problem::{self, Problem};

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new().routes(routes!(intake))
}

/// Sends a message to a channel
///
/// A CloudEvents 1.0 event on an `http` channel (SPEC §5.1): structured mode, the event as the
/// JSON body, or binary mode, its attributes in `ce-specversion`, `ce-id`, `ce-type` and
/// `ce-source` headers (`ce-subject` and `ce-time` optional) and its `data` as the body. The
/// event's `id` is its deduplication key: a message sent again is answered as the first was.
#[utoipa::path(
    post,
    path = "/v1/channels/{channel}/messages",
    operation_id = "send_message",
    params((
        "channel" = String,
        Path,
        description = "An `http` channel of an active deployment",
    )),
    request_body(
        description = "The event (structured mode), or its `data` (binary mode)",
        content((CloudEvent = "application/cloudevents+json"), (CloudEvent = "application/json")),
    ),
    responses(
        (
            status = 200,
            description = "`ack: complete`: the instance ended in time; the body is its `end` \
                node's reply",
            body = serde_json::Value,
            headers(("sutra-instance" = String, description = "The instance's id")),
        ),
        (
            status = 202,
            description = "Taken: the step it caused committed (with `ack: complete`, the \
                instance had not ended within `ack-timeout`)",
            body = sutra_wire::Accepted,
        ),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 429, response = TooMany),
        (
            status = 500,
            description = "`ack: complete`: the instance failed; the problem carries its \
                failure code, a flow's own or Sutra's, and `instance`. Or the server failed, as \
                `ServerError` says.",
            body = sutra_wire::Problem,
            content_type = "application/problem+json",
        ),
        (status = 503, response = Unavailable),
    ),
)]
async fn intake(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(channel): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let body = read_body(body, api.max_bytes).await?;
    let message = cloudevents::decode(&headers, &body)
        .map_err(|detail| Problem::new(codes::INTAKE_DECODE, detail))?;
    let inbound = Inbound {
        tenant: caller.tenant,
        channel,
        message,
        via: Transport::Http,
    };
    match api.engine.intake(inbound).await {
        Ok(answer) => Ok(answered(answer)),
        Err(error) => Err(intake_problem(error)),
    }
}

fn answered(answer: Answer) -> Response {
    let accepted = |instance, status, dedup| {
        let body = sutra_wire::Accepted {
            instance,
            status,
            dedup,
            extra: Extra::new(),
        };
        (StatusCode::ACCEPTED, Json(body)).into_response()
    };
    match answer {
        Answer::Accepted {
            instance,
            status,
            dedup,
        } => accepted(instance, status, dedup),
        Answer::StillRunning { instance, status } => accepted(Some(instance), status, false),
        Answer::Ended { instance, reply } => ended(&instance, reply),
    }
}

/// `ack: complete`: 200 with the `end` node's reply, or a problem carrying the flow's failure.
fn ended(instance: &str, reply: Reply) -> Response {
    let mut response = match reply {
        Reply::Completed(value) => (StatusCode::OK, Json(value)).into_response(),
        Reply::Failed { code, detail } => flow_failure(instance, &code, &detail),
        Reply::Cancelled => Problem::new(
            codes::ADMIN_STATE_INVALID,
            format!("instance {instance} was cancelled"),
        )
        .with("instance", json!(instance))
        .into_response(),
    };
    if let Ok(value) = instance.parse() {
        response.headers_mut().insert("sutra-instance", value);
    }
    response
}

/// A flow's own failure code (from a `fail` node or a worker) is passed through unchanged.
fn flow_failure(instance: &str, code: &str, detail: &str) -> Response {
    let status = StatusCode::INTERNAL_SERVER_ERROR;
    let mut body =
        sutra_wire::Problem::new(code, "Instance failed", status.as_u16(), detail, false);
    body.extensions.insert("instance".into(), json!(instance));
    problem::respond(status, body)
}

pub(crate) fn intake_problem(error: IntakeError) -> Problem {
    match error {
        IntakeError::UnknownChannel(channel) => Problem::new(
            codes::INTAKE_CHANNEL_UNKNOWN,
            format!("no deployed channel is named `{channel}`; deploy a document that declares it"),
        ),
        IntakeError::WrongTransport {
            channel, declared, ..
        } => Problem::new(
            codes::INTAKE_CHANNEL_TRANSPORT,
            format!(
                "channel `{channel}` is a {} channel: publish its messages to its {}, not over HTTP",
                declared.name(),
                if declared == Transport::Amqp {
                    "queue"
                } else {
                    "stream"
                }
            ),
        ),
        IntakeError::Invalid { detail, violations } => {
            let violations: Vec<sutra_wire::Violation> = violations
                .into_iter()
                .map(|v| sutra_wire::Violation {
                    pointer: v.pointer,
                    message: v.message,
                })
                .collect();
            Problem::new(codes::INTAKE_VALIDATION, detail).with("violations", json!(violations))
        }
        IntakeError::NoMatch { channel, key } => {
            let detail = match key {
                Some(key) => format!(
                    "no instance waits on channel `{channel}` with key `{key}`, and no flow starts on it"
                ),
                None => format!("channel `{channel}` has no `correlate`, and no flow starts on it"),
            };
            Problem::new(codes::RELAY_NO_MATCH, detail)
        }
        // The wait the message was correlated to was resolved between the correlation and the
        // step: nothing was applied or consumed, and the sender can act on that — sent again,
        // the message is correlated afresh. An administrator's code would tell it nothing.
        IntakeError::Engine(EngineError::Stale(detail)) => Problem::new(
            codes::RELAY_STALE,
            format!("{detail}; the wait this message was correlated to has moved on"),
        ),
        IntakeError::LiveInstances { .. } => Problem::new(
            codes::TENANT_LIVE_INSTANCES,
            "the tenant has as many live instances as `sutra.tenants.max-live-instances` \
             allows; nothing was started: send again once some have ended",
        ),
        IntakeError::Engine(error) => Problem::engine(error, codes::RESUME_CLAIM_HELD),
    }
}
