//! `GET /v1/schedules` and `POST /v1/schedules/{deployment}/{flow}/pause|resume` (issue 34,
//! decision 0056): the tenant's scheduled flows, and an operator's pause. Pausing is a column of
//! the schedule's row, so it holds fleet-wide and across restarts and deploys.

use axum::Json;
use axum::extract::{Extension, State};
use serde::Deserialize;
use sutra_core::codes;
use sutra_store::ScheduleKey;
use sutra_wire::{Extra, Schedules};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use super::extract::ApiPath;
use crate::auth::Caller;
use crate::openapi::{NotFound, ServerFailures};
use crate::problem::Problem;
use crate::render;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(pause))
        .routes(routes!(resume))
}

/// The schedule a route under `/v1/schedules/{deployment}/{flow}` acts on.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct SchedulePath {
    /// The deployment's name.
    deployment: String,
    /// The scheduled flow's name.
    flow: String,
}

/// Lists the schedules
///
/// The scheduled flows of the tenant's active deployment versions: when each fires next, the
/// last tick it fired and the instance that tick started, and whether it is paused.
#[utoipa::path(
    get,
    path = "/v1/schedules",
    operation_id = "schedules",
    responses(
        (status = 200, description = "The schedules", body = Schedules),
        ServerFailures,
    ),
)]
async fn list(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
) -> Result<Json<Schedules>, Problem> {
    let records = api
        .engine
        .store()
        .schedules(Some(&caller.tenant))
        .await
        .map_err(Problem::read)?;
    Ok(Json(Schedules {
        items: records.iter().map(render::schedule).collect(),
        next: None,
        extra: Extra::new(),
    }))
}

/// Pauses a schedule
///
/// No tick fires until it is resumed; the pause holds for every replica, across restarts and
/// deploys of the deployment.
#[utoipa::path(
    post,
    path = "/v1/schedules/{deployment}/{flow}/pause",
    operation_id = "pauseSchedule",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule, paused", body = sutra_wire::Schedule),
        (status = 404, response = NotFound),
        ServerFailures,
    ),
)]
async fn pause(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(path): ApiPath<SchedulePath>,
) -> Result<Json<sutra_wire::Schedule>, Problem> {
    set_paused(&api, &caller, path, true).await
}

/// Resumes a schedule
///
/// Its next due tick fires at the scheduler's next look; ticks that fell in the pause are missed
/// ticks, fired as the schedule's `catch-up` says.
#[utoipa::path(
    post,
    path = "/v1/schedules/{deployment}/{flow}/resume",
    operation_id = "resumeSchedule",
    params(SchedulePath),
    responses(
        (status = 200, description = "The schedule, resumed", body = sutra_wire::Schedule),
        (status = 404, response = NotFound),
        ServerFailures,
    ),
)]
async fn resume(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(path): ApiPath<SchedulePath>,
) -> Result<Json<sutra_wire::Schedule>, Problem> {
    set_paused(&api, &caller, path, false).await
}

async fn set_paused(
    api: &Api,
    caller: &Caller,
    SchedulePath { deployment, flow }: SchedulePath,
    paused: bool,
) -> Result<Json<sutra_wire::Schedule>, Problem> {
    let key = ScheduleKey {
        tenant: caller.tenant.clone(),
        deployment,
        flow,
    };
    let record = api
        .engine
        .store()
        .set_schedule_paused(&key, paused)
        .await
        .map_err(Problem::read)?
        .ok_or_else(|| {
            Problem::new(
                codes::SCHEDULE_NOT_FOUND,
                format!(
                    "deployment `{}` has no schedule on flow `{}`",
                    key.deployment, key.flow
                ),
            )
        })?;
    Ok(Json(render::schedule(&record)))
}
