//! The HTTP API (SPEC §4): routes, and the translation between HTTP and the engine.
//!
//! Handlers are thin: decode, call the engine, encode. Every refusal is a [`Problem`] with a
//! stable code; nothing here decides what a code means.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Extension, FromRequestParts, Path, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use futures_util::StreamExt;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::json;
use sutra_core::codes;
use sutra_core::model::Transport;
use sutra_core::snapshot::{ParkKind, Status};
use sutra_core::step::Reply;
use sutra_engine::intake::{Answer, Inbound, IntakeError};
use sutra_engine::{DeployError, Engine, Error as EngineError, Restored, bulk};
use sutra_store::{DeploymentRecord, DeploymentStatus, InstanceFilter, InstanceRecord};
use sutra_transport::consumer::Health;
use sutra_wire::{Extra, InstanceQuery, Page};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Caller, Gate, admit};
use crate::cloudevents;
use crate::openapi::{
    self, BadRequest, CloudEvent, Conflict, NotFound, PayloadTooLarge, ServerError, Unavailable,
    Unprocessable,
};
use crate::problem::{self, Problem};
use crate::render;
use crate::tokens::{Keyring, Role};

/// The most items one page of a listing holds.
const PAGE_MAX: u32 = 500;

#[derive(Clone)]
pub struct Api {
    pub engine: Arc<Engine>,
    pub max_bytes: usize,
    /// `None`: every request acts for tenant `default` with every role.
    pub tokens: Option<Arc<Keyring>>,
    /// How this replica's broker consumers are doing.
    pub consumers: Arc<Health>,
}

/// The routes in three groups, each behind a gate admitting the role it needs (SPEC §4); a
/// route added to a group takes that group's role. Each group is described as it is built, and
/// the parts make the API's OpenAPI document, served at `GET /openapi.json`.
pub fn router(api: Api) -> Router {
    let gated = |routes: OpenApiRouter<Api>, role| {
        let (routes, mut part) = routes.split_for_parts();
        openapi::gated(&mut part, role);
        let gate = Gate::new(api.tokens.clone(), role);
        let routes = routes.route_layer(axum::middleware::from_fn_with_state(gate, admit));
        (routes, part)
    };
    let (senders, senders_part) = gated(OpenApiRouter::new().routes(routes!(intake)), Role::Sender);
    let (workers, workers_part) = gated(crate::tasks::routes(), Role::Worker);
    let admins = OpenApiRouter::new()
        .routes(routes!(deploy, deployments))
        .routes(routes!(deployment))
        .routes(routes!(deployment_graph))
        .routes(routes!(instances))
        .routes(routes!(instance))
        .routes(routes!(history))
        .routes(routes!(outbox))
        .routes(routes!(instance_tasks))
        .routes(routes!(cancel))
        .routes(routes!(restore))
        .routes(routes!(migrate))
        .routes(routes!(bulk))
        .routes(routes!(crate::leases::list))
        .routes(routes!(scaling));
    let (admins, admins_part) = gated(admins, Role::Admin);
    // Open, tokens or not: probes, metrics and the document carry no credentials and show no
    // tenant's rows.
    let (open, mut open_part) = OpenApiRouter::new()
        .routes(routes!(healthy))
        .routes(routes!(ready))
        .routes(routes!(crate::metrics::render))
        .routes(routes!(openapi::serve))
        .split_for_parts();
    openapi::open(&mut open_part);
    let document = openapi::document([senders_part, workers_part, admins_part, open_part]);
    Router::new()
        .merge(admins)
        .merge(senders)
        .merge(workers)
        .merge(open.layer(Extension(document)))
        .fallback(unrouted)
        .layer(axum::middleware::from_fn(refuse_nul_in_url))
        .with_state(api)
}

/// A request no route took: the console's page or one of its assets (decision 0036), or else
/// the API's refusal. Nothing under `/v1/` is ever the console's.
async fn unrouted(
    State(api): State<Api>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> Response {
    let readable = method == axum::http::Method::GET || method == axum::http::Method::HEAD;
    if readable && let Some(answer) = crate::console::serve(uri.path(), api.tokens.is_some()) {
        return answer;
    }
    Problem::new(
        codes::API_ROUTE_NOT_FOUND,
        "no such endpoint; the API lives under /v1/",
    )
    .into_response()
}

/// Refuses a URL holding `%00` before any route reads it: PostgreSQL text cannot hold the
/// character, so a path or query parameter with it could only fail inside the store, where
/// SQLite would have taken it (every body is refused for it the same way).
async fn refuse_nul_in_url(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let holds_nul = |part: &str| part.as_bytes().windows(3).any(|w| w == b"%00");
    let uri = request.uri();
    if holds_nul(uri.path()) || uri.query().is_some_and(holds_nul) {
        return invalid(
            "the URL holds %00, the character \\u0000, which cannot be stored; remove it",
        )
        .into_response();
    }
    next.run(request).await
}

type Result<T, E = Problem> = std::result::Result<T, E>;

/// How much of an oversized body is read and dropped before answering 413. A server that
/// answers while the client is still sending makes most clients report a broken connection
/// instead of the answer; reading a bounded excess lets them see the 413 and its code.
const OVERSIZED_DRAIN_BYTES_MAX: usize = 16 << 20;

pub(crate) async fn read_body(body: Body, max_bytes: usize) -> Result<axum::body::Bytes> {
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
pub(crate) async fn parse<T: DeserializeOwned>(api: &Api, body: Body) -> Result<T> {
    let bytes = read_body(body, api.max_bytes).await?;
    sutra_core::request::json(&bytes).map_err(invalid)
}

/// A query string, refused as problem+json (`SUTRA.API.REQUEST.INVALID`, naming what does not
/// fit) rather than with axum's plain-text answer.
pub(crate) struct ApiQuery<T>(pub T);

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
pub(crate) struct ApiPath<T>(pub T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for ApiPath<T> {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApiPath<T>> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(path)) => Ok(ApiPath(path)),
            Err(rejection) => Err(invalid(format!("the path: {}", rejection.body_text()))),
        }
    }
}

/// The instance a route under `/v1/instances/{id}` acts on.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct InstancePath {
    /// The instance's id.
    id: String,
}

/// A deployment version.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct DeploymentPath {
    /// The deployment's name.
    name: String,
    /// The version.
    version: u32,
}

/// A listing's `after`, if it is one of the cursors this server gives (`ours`): anything else
/// would silently page from nowhere.
pub(crate) fn cursor(after: Option<String>, ours: fn(&str) -> bool) -> Result<Option<String>> {
    match after {
        Some(after) if !ours(&after) => Err(invalid(format!(
            "`after`: `{}` is not a cursor this server gave; pass the `next` of the previous page",
            after.chars().take(64).collect::<String>()
        ))),
        after => Ok(after),
    }
}

/// An instance id, as the cursors of the instance listing are.
pub(crate) fn is_instance_id(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok()
}

/// Refuses a JSON body with a string or key holding `\u0000`, naming where. One that is not
/// JSON at all is left to the typed read, which says why.
/// A request whose parameters or body do not fit (`SUTRA.API.REQUEST.INVALID`).
pub(crate) fn invalid(detail: impl Into<String>) -> Problem {
    Problem::new(codes::API_REQUEST_INVALID, detail)
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
        IntakeError::Engine(error) => Problem::engine(error, codes::RESUME_CLAIM_HELD),
    }
}

/// The name diagnostics are rendered against: the client's file name when it sends one
/// (`Sutra-File`, as `sutra deploy FILE` does), so that `--> FILE:line:col` points at the
/// user's own file.
fn deployment_file_name(headers: &HeaderMap) -> String {
    const NAME_CHARS_MAX: usize = 200;
    headers
        .get("sutra-file")
        .and_then(|value| value.to_str().ok())
        .filter(|name| !name.is_empty() && name.chars().count() <= NAME_CHARS_MAX)
        .unwrap_or("deployment.yaml")
        .to_owned()
}

/// Deploys a document
///
/// The body is the YAML document. It is checked as `sutra check` checks it (an invalid one is
/// refused with every error located), stored as the next version of its name, and activated on
/// every replica (SPEC §7.1).
#[utoipa::path(
    post,
    path = "/v1/deployments",
    operation_id = "deploy",
    params((
        "Sutra-File" = Option<String>,
        Header,
        nullable = false,
        description = "The file name diagnostics point at, as `sutra deploy FILE` sends it; \
            `deployment.yaml` by default",
    )),
    request_body(
        content = String,
        content_type = "application/yaml",
        description = "The deployment document",
    ),
    responses(
        (
            status = 201,
            description = "Deployed, with what the checker warned about",
            body = sutra_wire::Deployment,
        ),
        (status = 400, response = BadRequest),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn deploy(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response> {
    let file = deployment_file_name(&headers);
    let body = read_body(body, api.max_bytes).await?;
    let source = String::from_utf8(body.to_vec())
        .map_err(|_| Problem::new(codes::DEPLOY_INVALID, "the deployment must be UTF-8 YAML"))?;
    match api.engine.deploy(&caller.tenant, &source).await {
        Ok(deployed) => {
            let warnings = deployed.warnings.iter();
            let mut body = render::deployment(&deployed.record);
            body.warnings = Some(warnings.map(|d| render::diagnostic(d, &file)).collect());
            Ok((StatusCode::CREATED, Json(body)).into_response())
        }
        Err(DeployError::Invalid(diagnostics)) => {
            let rendered = sutra_core::diagnostic::render_all(&diagnostics, &file, &source);
            let listed: Vec<sutra_wire::Diagnostic> = diagnostics
                .iter()
                .map(|d| render::diagnostic(d, &file))
                .collect();
            Err(Problem::new(codes::DEPLOY_INVALID, rendered).with("diagnostics", json!(listed)))
        }
        Err(error @ DeployError::OtherTenant { .. }) => {
            Err(Problem::new(codes::AUTH_FORBIDDEN, error.to_string()))
        }
        Err(DeployError::Engine(error)) => Err(Problem::engine(error, codes::RESUME_CLAIM_HELD)),
    }
}

/// Lists the deployments
///
/// Every version of every deployment of the caller's tenant, on one page (`next` is null).
#[utoipa::path(
    get,
    path = "/v1/deployments",
    operation_id = "deployments",
    responses(
        (status = 200, description = "The deployments", body = Page<sutra_wire::Deployment>),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn deployments(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Page<sutra_wire::Deployment>>> {
    let records = api
        .engine
        .store()
        .deployments(Some(&caller.tenant))
        .await
        .map_err(store_problem)?;
    let items = records.iter().map(render::deployment).collect();
    Ok(Json(Page { items, next: None }))
}

/// Reads one deployment version
///
/// With its YAML, and for a draining version what keeps it from retiring (SPEC §7.3).
#[utoipa::path(
    get,
    path = "/v1/deployments/{name}/{version}",
    operation_id = "deployment",
    params(DeploymentPath),
    responses(
        (status = 200, description = "The version", body = sutra_wire::Deployment),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn deployment(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(DeploymentPath { name, version }): ApiPath<DeploymentPath>,
) -> Result<Json<sutra_wire::Deployment>> {
    let record = stored_version(&api, &caller, &name, version).await?;
    let mut body = render::deployment(&record);
    if record.status == DeploymentStatus::Draining {
        let store = api.engine.store();
        let blocking = store
            .retirement(&caller.tenant, &name, version)
            .await
            .map_err(store_problem)?;
        body.retirement = Some(render::retirement(blocking));
    }
    body.source = Some(record.source);
    Ok(Json(body))
}

/// The caller's tenant's stored deployment `name` at `version`, or the API's 404.
async fn stored_version(
    api: &Api,
    caller: &Caller,
    name: &str,
    version: u32,
) -> Result<DeploymentRecord> {
    let records = api
        .engine
        .store()
        .deployments(Some(&caller.tenant))
        .await
        .map_err(store_problem)?;
    records
        .into_iter()
        .find(|r| r.name == name && r.version == version)
        .ok_or_else(|| {
            Problem::new(
                codes::DEPLOY_NOT_FOUND,
                format!("no deployment `{name}` version {version}"),
            )
        })
}

/// Reads one deployment version's flows as graphs
///
/// Each flow's nodes with where control can go from each, and the `parallel` branch holding
/// it: what an instance's tokens are positioned on.
#[utoipa::path(
    get,
    path = "/v1/deployments/{name}/{version}/graph",
    operation_id = "deployment_graph",
    params(DeploymentPath),
    responses(
        (status = 200, description = "The flows", body = sutra_wire::DeploymentGraph),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn deployment_graph(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(DeploymentPath { name, version }): ApiPath<DeploymentPath>,
) -> Result<Json<sutra_wire::DeploymentGraph>> {
    let record = stored_version(&api, &caller, &name, version).await?;
    // A stored version was checked when it was deployed; checking it again gives its model.
    let checked = sutra_core::check::check(&record.source);
    let deployment = checked.deployment.ok_or_else(|| {
        Problem::new(
            codes::STORE_CORRUPT,
            format!("deployment `{name}` version {version}: its stored document no longer checks"),
        )
    })?;
    Ok(Json(sutra_wire::DeploymentGraph {
        name,
        version,
        flows: crate::graph::flows(&deployment),
        extra: Extra::new(),
    }))
}

/// Lists instances
///
/// A page at a time: pass a page's `next` as `after` for the next one.
#[utoipa::path(
    get,
    path = "/v1/instances",
    operation_id = "instances",
    params(InstanceQuery),
    responses(
        (status = 200, description = "A page of instances", body = Page<sutra_wire::Instance>),
        (status = 400, response = BadRequest),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn instances(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<InstanceQuery>,
) -> Result<Json<Page<sutra_wire::Instance>>> {
    let status = query.status.as_deref().map(parse_status).transpose()?;
    let limit = page_limit(query.limit);
    let filter = InstanceFilter {
        status,
        flow: query.flow,
        version: query.version,
        created_before: instant("created_before", query.created_before)?,
        created_after: instant("created_after", query.created_after)?,
        after: cursor(query.after, is_instance_id)?,
        limit,
    };
    let records = api
        .engine
        .store()
        .instances(&caller.tenant, &filter)
        .await
        .map_err(store_problem)?;
    let next = next_cursor(&records, limit, |r| &r.snapshot.instance.id);
    // Matched within the page, as a bulk filter matches its failure code: the cursor is the
    // store page's, so a short page can still have a `next`.
    let failure_code = query.failure_code.as_deref();
    let key = query.correlation_key.as_deref();
    let items = records
        .iter()
        .filter(|r| failure_code.is_none_or(|code| failed_with(r, code)))
        .filter(|r| key.is_none_or(|key| waits_on_key(r, key)))
        .map(render::instance)
        .collect::<Result<_>>()?;
    Ok(Json(Page { items, next }))
}

/// An RFC 3339 instant of a filter, named by `field` when it is not one.
fn instant(field: &str, text: Option<String>) -> Result<Option<jiff::Timestamp>> {
    text.map(|text| {
        text.parse::<jiff::Timestamp>()
            .map_err(|e| invalid(format!("`{field}`: {e}; use an RFC 3339 instant")))
    })
    .transpose()
}

/// The instance is stopped at failure `code`.
fn failed_with(record: &InstanceRecord, code: &str) -> bool {
    let failure = record.snapshot.failure.as_ref();
    failure.is_some_and(|failure| failure.code == code)
}

/// A token of the instance is parked on a `receive` for correlation key `key`.
fn waits_on_key(record: &InstanceRecord, key: &str) -> bool {
    record.snapshot.tokens.iter().any(|token| {
        matches!(
            token.park().map(|park| &park.kind),
            Some(ParkKind::Receive { key: waited, .. }) if waited == key
        )
    })
}

/// A keyset page's size: 100 unless asked, at most [`PAGE_MAX`].
pub(crate) fn page_limit(limit: Option<u32>) -> u32 {
    limit.unwrap_or(100).clamp(1, PAGE_MAX)
}

/// The cursor of the page after `items`: the last item's id when the page is full, `None` when
/// it is the last page.
pub(crate) fn next_cursor<T>(
    items: &[T],
    limit: u32,
    id: impl Fn(&T) -> &String,
) -> Option<String> {
    let full = items.len() as u32 == limit;
    items.last().filter(|_| full).map(|item| id(item).clone())
}

/// A status a listing filters by: any but `created`, which no stored instance rests in.
fn parse_status(text: &str) -> Result<Status> {
    Status::parse(text)
        .filter(|status| *status != Status::Created)
        .ok_or_else(|| {
            Problem::new(
                codes::API_REQUEST_INVALID,
                format!("unknown status `{text}`; use suspended, completed, cancelled or failed"),
            )
        })
}

/// Reads an instance
#[utoipa::path(
    get,
    path = "/v1/instances/{id}",
    operation_id = "instance",
    params(InstancePath),
    responses(
        (status = 200, description = "Its snapshot", body = sutra_wire::Instance),
        (status = 404, response = NotFound),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn instance(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Json<sutra_wire::Instance>> {
    let record = find_instance(&api, &caller, &id).await?;
    Ok(Json(render::instance(&record)?))
}

async fn find_instance(api: &Api, caller: &Caller, id: &str) -> Result<InstanceRecord> {
    api.engine
        .store()
        .instance(&caller.tenant, id)
        .await
        .map_err(store_problem)?
        .ok_or_else(|| Problem::new(codes::INSTANCE_NOT_FOUND, format!("no instance {id}")))
}

/// The rows `read` gives, once the instance is known to be the caller's: a missing instance is
/// `SUTRA.INSTANCE.NOT_FOUND`, never an empty list. `read` is lazy, so it runs after the check.
async fn rows_of_instance<T>(
    api: &Api,
    caller: &Caller,
    id: &str,
    read: impl Future<Output = sutra_store::Result<T>>,
) -> Result<T> {
    find_instance(api, caller, id).await?;
    read.await.map_err(store_problem)
}

/// Reads an instance's history
///
/// Its audit events in sequence order: `seq` starts at 1 and has no gaps.
#[utoipa::path(
    get,
    path = "/v1/instances/{id}/history",
    operation_id = "history",
    params(InstancePath),
    responses(
        (status = 200, description = "The events", body = Vec<sutra_wire::HistoryEvent>),
        (status = 404, response = NotFound),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn history(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Json<Vec<sutra_wire::HistoryEvent>>> {
    let read = api.engine.store().history(&caller.tenant, &id);
    let events = rows_of_instance(&api, &caller, &id, read).await?;
    let events = events.iter().map(|e| render::history_event(e, &id));
    Ok(Json(events.collect::<Result<_>>()?))
}

/// Lists the messages an instance emitted
///
/// In emission order, with where each stands.
#[utoipa::path(
    get,
    path = "/v1/instances/{id}/outbox",
    operation_id = "outbox",
    params(InstancePath),
    responses(
        (status = 200, description = "The messages", body = Vec<sutra_wire::OutboxMessage>),
        (status = 404, response = NotFound),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn outbox(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Json<Vec<sutra_wire::OutboxMessage>>> {
    let read = api.engine.store().outbox(&caller.tenant, &id);
    let records = rows_of_instance(&api, &caller, &id, read).await?;
    Ok(Json(records.iter().map(render::outbox_message).collect()))
}

/// Lists an instance's tasks
///
/// Every task row its parks made, in whatever state, by park.
#[utoipa::path(
    get,
    path = "/v1/instances/{id}/tasks",
    operation_id = "instance_tasks",
    params(InstancePath),
    responses(
        (status = 200, description = "The tasks", body = Vec<sutra_wire::TaskSummary>),
        (status = 404, response = NotFound),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn instance_tasks(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Json<Vec<sutra_wire::TaskSummary>>> {
    let read = api.engine.store().tasks(&caller.tenant, &id);
    let records = rows_of_instance(&api, &caller, &id, read).await?;
    Ok(Json(records.iter().map(render::task_summary).collect()))
}

/// Cancels an instance
///
/// It ends `cancelled`; its waits, timers and tasks are resolved.
#[utoipa::path(
    post,
    path = "/v1/instances/{id}/cancel",
    operation_id = "cancel",
    params(InstancePath),
    responses(
        (status = 200, description = "Cancelled", body = sutra_wire::StatusChange),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn cancel(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Json<sutra_wire::StatusChange>> {
    let outcome = api.engine.cancel(&caller.tenant, &id).await;
    administered(outcome, codes::CANCEL_CLAIM_HELD)
}

/// Restores a failed instance
///
/// `failed` becomes `suspended`, its parks re-armed (SPEC §7.2): `200`. When a step held its
/// claim, the restore is asked as a delivery that runs once the claim is free: `202` with
/// `"restore": "asked"`, the instance still `failed` meanwhile.
#[utoipa::path(
    post,
    path = "/v1/instances/{id}/restore",
    operation_id = "restore",
    params(InstancePath),
    responses(
        (status = 200, description = "Restored", body = sutra_wire::StatusChange),
        (
            status = 202,
            description = "Asked, to run once the claim is free",
            body = sutra_wire::StatusChange,
        ),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn restore(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Response> {
    let restored = api.engine.restore(&caller.tenant, &id).await;
    match restored.map_err(|e| Problem::engine(e, codes::RESTORE_CLAIM_HELD))? {
        Restored::Now(outcome) => {
            Ok(administered(Ok(outcome), codes::RESTORE_CLAIM_HELD)?.into_response())
        }
        Restored::Asked => {
            let mut extra = Extra::new();
            extra.insert("restore".into(), json!("asked"));
            let body = sutra_wire::StatusChange {
                instance: id,
                status: Status::Failed.as_str().to_owned(),
                extra,
            };
            Ok((StatusCode::ACCEPTED, Json(body)).into_response())
        }
    }
}

/// Migrates an instance onto another version
///
/// A `suspended` or `failed` instance moves onto version `to_version` of its deployment, each
/// token's node mapped by `map` (a node not named keeps its id; SPEC §7.4). Answers the
/// instance as it is now.
#[utoipa::path(
    post,
    path = "/v1/instances/{id}/migrate",
    operation_id = "migrate",
    params(InstancePath),
    request_body = sutra_wire::MigrateBody,
    responses(
        (status = 200, description = "Migrated", body = sutra_wire::Instance),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 422, response = Unprocessable),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn migrate(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
    body: Body,
) -> Result<Json<sutra_wire::Instance>> {
    let sutra_wire::MigrateBody { to_version, map } = parse(&api, body).await?;
    api.engine
        .migrate(&caller.tenant, &id, to_version, map)
        .await
        .map_err(|e| Problem::engine(e, codes::MIGRATE_CLAIM_HELD))?;
    let record = find_instance(&api, &caller, &id).await?;
    Ok(Json(render::instance(&record)?))
}

/// Repairs instances in bulk
///
/// One action on each instance the filter selects, each alone, a page (at most 500) per call;
/// pass `next` as `after` for the next page (decision 0028).
#[utoipa::path(
    post,
    path = "/v1/instances/bulk",
    operation_id = "bulk",
    request_body = sutra_wire::BulkBody,
    responses(
        (
            status = 200,
            description = "What became of each selected instance",
            body = sutra_wire::BulkAnswer,
        ),
        (status = 400, response = BadRequest),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn bulk(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<Json<sutra_wire::BulkAnswer>> {
    let body: sutra_wire::BulkBody = parse(&api, body).await?;
    let (request, busy) = bulk_request(body)?;
    let page = api
        .engine
        .bulk(&caller.tenant, &request)
        .await
        .map_err(|e| Problem::engine(e, busy))?;
    let results = page
        .results
        .into_iter()
        .map(|(instance, acted)| bulk_result(instance, acted, busy))
        .collect();
    Ok(Json(sutra_wire::BulkAnswer {
        results,
        next: page.next,
        extra: Extra::new(),
    }))
}

/// The engine's request, and the action's CLAIM_HELD code.
fn bulk_request(body: sutra_wire::BulkBody) -> Result<(bulk::Request, codes::Code)> {
    let (action, busy) = match (body.action.as_str(), body.to_version) {
        ("restore", None) => (bulk::Action::Restore, codes::RESTORE_CLAIM_HELD),
        ("cancel", None) => (bulk::Action::Cancel, codes::CANCEL_CLAIM_HELD),
        ("migrate", Some(to_version)) => {
            let map = body.map;
            (
                bulk::Action::Migrate { to_version, map },
                codes::MIGRATE_CLAIM_HELD,
            )
        }
        ("migrate", None) => {
            return Err(invalid(
                "`to_version`: `migrate` needs the version to move onto",
            ));
        }
        ("restore" | "cancel", Some(_)) => {
            return Err(invalid("`to_version`: only `migrate` takes a version"));
        }
        (other, _) => {
            return Err(invalid(format!(
                "`action`: unknown action `{other}`; use restore, cancel or migrate"
            )));
        }
    };
    let filter = body.filter;
    let instant = |field: &str, text| instant(&format!("filter.{field}"), text);
    let selection = bulk::Selection {
        status: filter.status.as_deref().map(parse_status).transpose()?,
        flow: filter.flow,
        version: filter.version,
        failure_code: filter.failure_code,
        created_before: instant("created_before", filter.created_before)?,
        created_after: instant("created_after", filter.created_after)?,
    };
    let request = bulk::Request {
        selection,
        action,
        limit: page_limit(body.limit),
        after: body.after,
        dry_run: body.dry_run,
    };
    Ok((request, busy))
}

/// What became of one instance: done, skipped when its state no longer allows the action,
/// refused otherwise (its code says whether a retry can help).
fn bulk_result(
    instance: String,
    acted: Option<std::result::Result<sutra_engine::runner::StepOutcome, EngineError>>,
    busy: codes::Code,
) -> sutra_wire::BulkResult {
    let (outcome, status, problem) = match acted {
        None => ("matched", None, None),
        Some(Ok(done)) => ("done", Some(done.status.as_str().to_owned()), None),
        Some(Err(error @ EngineError::InvalidState(_))) => {
            ("skipped", None, Some(Problem::engine(error, busy)))
        }
        Some(Err(error)) => ("refused", None, Some(Problem::engine(error, busy))),
    };
    sutra_wire::BulkResult {
        instance,
        outcome: outcome.to_owned(),
        status,
        code: problem.as_ref().map(|p| p.code().code.to_owned()),
        detail: problem.as_ref().map(Problem::explained),
        extra: Extra::new(),
    }
}

/// The answer of an administrative operation; `busy` is its path's CLAIM_HELD code.
fn administered(
    outcome: std::result::Result<sutra_engine::runner::StepOutcome, EngineError>,
    busy: codes::Code,
) -> Result<Json<sutra_wire::StatusChange>> {
    let outcome = outcome.map_err(|e| Problem::engine(e, busy))?;
    Ok(Json(sutra_wire::StatusChange {
        instance: outcome.instance,
        status: outcome.status.as_str().to_owned(),
        extra: Extra::new(),
    }))
}

/// Reads the scaling signal
///
/// What waits for the fleet, counted in the database, and the steps in progress on the replica
/// that answered (SPEC §8).
#[utoipa::path(
    get,
    path = "/v1/scaling",
    operation_id = "scaling",
    responses(
        (status = 200, description = "The signal", body = sutra_wire::Scaling),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn scaling(State(api): State<Api>) -> Result<Json<sutra_wire::Scaling>> {
    let backlog = api
        .engine
        .backlog()
        .await
        .map_err(|e| Problem::engine(e, codes::RESUME_CLAIM_HELD))?;
    Ok(Json(sutra_wire::Scaling {
        inbox_backlog: backlog.inbox,
        outbox_backlog: backlog.outbox,
        tasks_available: backlog.tasks_available.into_iter().collect(),
        tasks_locked: backlog.tasks_locked,
        instances: backlog
            .instances
            .into_iter()
            .map(|(status, n)| (status.as_str().to_owned(), n))
            .collect(),
        claims_in_flight: api.engine.claims_in_flight() as u64,
        extra: Extra::new(),
    }))
}

/// Liveness
///
/// `ok` whenever the process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    operation_id = "health",
    responses(
        (status = 200, description = "Alive", body = sutra_wire::Health),
    ),
)]
async fn healthy() -> Json<sutra_wire::Health> {
    Json(sutra_wire::Health {
        status: "ok".into(),
    })
}

/// Readiness
///
/// Ready when the store accepts a commit, no lane is wedged and every broker channel is
/// consumed: a replica that cannot make progress must not take traffic, and says what it
/// cannot reach.
#[utoipa::path(
    get,
    path = "/readyz",
    operation_id = "readiness",
    responses(
        (status = 200, description = "Ready", body = sutra_wire::Readiness),
        (status = 500, response = ServerError),
        (status = 503, response = Unavailable),
    ),
)]
async fn ready(State(api): State<Api>) -> Result<Json<sutra_wire::Readiness>> {
    api.engine.store().ping().await.map_err(store_problem)?;
    let wedged = api.engine.wedged_lanes();
    if !wedged.is_empty() {
        let detail =
            format!("lanes {wedged:?} have been on one step for longer than the claim timeout");
        return Err(Problem::new(codes::ENGINE_UNAVAILABLE, detail));
    }
    // The probe is open: it names the channel and its broker, never the tenant.
    let stalled = api.consumers.stalled();
    if !stalled.is_empty() {
        let named: Vec<String> = stalled
            .iter()
            .map(|stalled| format!("channel `{}` ({})", stalled.channel, stalled.reason))
            .collect();
        let detail = format!("cannot consume {}", named.join("; "));
        return Err(Problem::new(codes::ENGINE_UNAVAILABLE, detail));
    }
    Ok(Json(sutra_wire::Readiness {
        status: "ready".into(),
        lanes: api.engine.lane_queue_depths(),
    }))
}

/// A read's store error: reads claim no instance, so no claim can be held against them.
pub(crate) fn store_problem(error: sutra_store::Error) -> Problem {
    Problem::store(error, codes::RESUME_CLAIM_HELD)
}
