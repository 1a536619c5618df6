//! Deployments (SPEC §7.1, §7.3): deploying a document, and reading the versions stored, each
//! with its YAML or its flows as graphs.

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sutra_core::codes;
use sutra_engine::DeployError;
use sutra_store::{DeploymentRecord, DeploymentStatus};
use sutra_wire::{Extra, Page};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use super::extract::{ApiPath, Result, read_body};
use crate::auth::Caller;
use crate::openapi::{
    BadRequest, Conflict, DeploymentDocument, NotFound, PayloadTooLarge, ServerFailures,
};
use crate::problem::Problem;
use crate::render;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new()
        .routes(routes!(deploy, deployments))
        .routes(routes!(deployment))
        .routes(routes!(deployment_graph))
}

/// A deployment version.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct DeploymentPath {
    /// The deployment's name.
    name: String,
    /// The version: they count from 1.
    #[param(minimum = 1)]
    version: u32,
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
        content = DeploymentDocument,
        content_type = "application/yaml",
        description = "The deployment document, YAML",
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
        ServerFailures,
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
        ServerFailures,
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
        .map_err(Problem::read)?;
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
        ServerFailures,
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
            .map_err(Problem::read)?;
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
        .map_err(Problem::read)?;
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
        ServerFailures,
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
