//! The probes (SPEC §8), open whether or not the server has tokens: liveness, and readiness —
//! whether this replica can make progress.

use axum::Json;
use axum::extract::State;
use sutra_core::codes;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use super::extract::Result;
use crate::openapi::ServerFailures;
use crate::problem::Problem;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new()
        .routes(routes!(healthy))
        .routes(routes!(ready))
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
        ServerFailures,
    ),
)]
async fn ready(State(api): State<Api>) -> Result<Json<sutra_wire::Readiness>> {
    api.engine.store().ping().await.map_err(Problem::read)?;
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
