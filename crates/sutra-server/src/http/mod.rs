//! The HTTP API (SPEC §4): the router, and one module per resource translating between HTTP and
//! the engine — [`intake`] (a channel's messages), [`tasks`], [`deployments`], [`instances`],
//! [`operations`] (bulk repair and the scaling signal), [`leases`], [`schedules`], [`system`] (the
//! replica's last fifteen minutes, for the console) and [`probes`] — over what
//! they share: [`extract`] (bodies, query strings and paths) and [`paging`].
//!
//! The operator views — the scaling signal, the last fifteen minutes, the leases — show the
//! fleet's figures to the operator and a tenant's own to its administrator (decision 0076).
//!
//! Handlers are thin: decode, call the engine, encode. Every refusal is a [`Problem`] with a
//! stable code; nothing here decides what a code means.

mod deployments;
mod extract;
mod instances;
pub(crate) mod intake;
mod leases;
mod operations;
mod paging;
mod probes;
mod schedules;
mod system;
mod tasks;

use std::sync::Arc;

use axum::Router;
use axum::extract::{Extension, State};
use axum::response::{IntoResponse, Response};
use sutra_core::codes;
use sutra_engine::Engine;
use sutra_transport::consumer::Health;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Gate, admit};
use crate::openapi;
use crate::problem::Problem;
use crate::tokens::{Keyring, Role};

/// The roles the operator views admit: a tenant's administrator sees its tenant's figures, the
/// operator the fleet's.
const VIEWERS: &[Role] = &[Role::Admin, Role::Operator];

#[derive(Clone)]
pub struct Api {
    pub engine: Arc<Engine>,
    pub max_bytes: usize,
    /// `None`: every request acts for tenant `default` with every role.
    pub tokens: Option<Arc<Keyring>>,
    /// How this replica's broker consumers are doing.
    pub consumers: Arc<Health>,
}

/// The routes in four groups, each behind a gate admitting the roles it needs (SPEC §4); a
/// route added to a group takes that group's roles. Each group is described as it is built, and
/// the parts make the API's OpenAPI document, served at `GET /openapi.json`.
pub fn router(api: Api) -> Router {
    let gate = |admits| {
        let gate = Gate::new(api.tokens.clone(), admits);
        axum::middleware::from_fn_with_state(gate, admit)
    };
    let gated = |routes: OpenApiRouter<Api>, tag, admits| {
        let (routes, mut part) = routes.split_for_parts();
        openapi::gated(&mut part, tag);
        (routes.route_layer(gate(admits)), part)
    };
    let (senders, senders_part) = gated(intake::routes(), Role::Sender.as_str(), &[Role::Sender]);
    let (workers, workers_part) = gated(tasks::routes(), Role::Worker.as_str(), &[Role::Worker]);
    let admins = deployments::routes()
        .merge(instances::routes())
        .merge(operations::routes())
        .merge(schedules::routes());
    let (admins, admins_part) = gated(admins, Role::Admin.as_str(), &[Role::Admin]);
    let views = operations::views()
        .merge(leases::routes())
        .merge(system::routes());
    let (views, views_part) = gated(views, openapi::VIEWS, VIEWERS);
    // Open, tokens or not: probes and the document carry no credentials and show no tenant's
    // rows; so does `/metrics`, unless its series name what tenants chose, when it is the
    // operator's alone.
    let (metrics, mut metrics_part) = OpenApiRouter::new()
        .routes(routes!(crate::metrics::render))
        .split_for_parts();
    let metrics = if api.engine.config().metric_tenant_labels {
        metrics.route_layer(gate(&[Role::Operator]))
    } else {
        metrics
    };
    let (open, mut open_part) = probes::routes()
        .routes(routes!(openapi::serve))
        .split_for_parts();
    openapi::open(&mut metrics_part);
    openapi::open(&mut open_part);
    let document = openapi::document([
        senders_part,
        workers_part,
        admins_part,
        views_part,
        metrics_part,
        open_part,
    ]);
    Router::new()
        .merge(admins)
        .merge(views)
        .merge(senders)
        .merge(workers)
        .merge(metrics)
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
        return extract::invalid(
            "the URL holds %00, the character \\u0000, which cannot be stored; remove it",
        )
        .into_response();
    }
    next.run(request).await
}
