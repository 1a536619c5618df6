//! The HTTP API (SPEC §4): the router, and one module per resource translating between HTTP and
//! the engine — [`intake`] (a channel's messages), [`tasks`], [`deployments`], [`instances`],
//! [`operations`] (bulk repair and the scaling signal), [`leases`], [`schedules`], [`system`] (the
//! replica's last fifteen minutes, for the console) and [`probes`] — over what
//! they share: [`extract`] (bodies, query strings and paths) and [`paging`].
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
    let (senders, senders_part) = gated(intake::routes(), Role::Sender);
    let (workers, workers_part) = gated(tasks::routes(), Role::Worker);
    let admins = deployments::routes()
        .merge(instances::routes())
        .merge(operations::routes())
        .merge(leases::routes())
        .merge(schedules::routes())
        .merge(system::routes());
    let (admins, admins_part) = gated(admins, Role::Admin);
    // Open, tokens or not: probes, metrics and the document carry no credentials and show no
    // tenant's rows.
    let (open, mut open_part) = probes::routes()
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
        return extract::invalid(
            "the URL holds %00, the character \\u0000, which cannot be stored; remove it",
        )
        .into_response();
    }
    next.run(request).await
}
