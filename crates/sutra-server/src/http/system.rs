//! `GET /v1/system/history` (docs/decisions/0061): the answering replica's pulse — its steps,
//! their latency and its failures over the last fifteen minutes, with the fleet's backlog beside
//! them — as the console's System page draws it. Counts, never a tenant's rows; an operator view
//! like the scaling signal: the operator sees the replica's, a tenant's administrator its
//! tenant's steps alone (decision 0076).

use std::time::Duration;

use axum::Json;
use axum::extract::{Extension, State};
use jiff::SignedDuration;
use sutra_engine::pulse::{SAMPLE_INTERVAL, SAMPLES_KEPT, Sample};
use sutra_wire::{Extra, SystemHistory, SystemSample};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use crate::auth::Viewer;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new().routes(routes!(history))
}

/// Reads this replica's last fifteen minutes
///
/// One sample every ten seconds, oldest first, kept in the answering replica's memory: its
/// committed steps, its steps that did not commit, the instances its steps failed, its step
/// latency (p50 and p99), and the fleet's backlog as the database counted it then. A replica that
/// started less than fifteen minutes ago has fewer samples (decision 0061). A token with the
/// `admin` role sees its tenant's steps alone and no backlog; one with the `operator` role (or a
/// server without tokens) every tenant's (decision 0076).
#[utoipa::path(
    get,
    path = "/v1/system/history",
    operation_id = "systemHistory",
    responses(
        (status = 200, description = "The samples", body = SystemHistory),
    ),
)]
async fn history(
    State(api): State<Api>,
    Extension(viewer): Extension<Viewer>,
) -> Json<SystemHistory> {
    let pulse = api.engine.pulse();
    let tenant = viewer.tenant();
    // SAMPLES_KEPT is 90: it fits a u32.
    let window = SAMPLE_INTERVAL * SAMPLES_KEPT as u32;
    Json(SystemHistory {
        replica: api.engine.config().replica_id.clone(),
        tenant: tenant.map(str::to_owned),
        since: pulse.since().to_string(),
        interval: iso(SAMPLE_INTERVAL),
        window: iso(window),
        samples: pulse.samples(tenant).iter().map(sample).collect(),
        extra: Extra::new(),
    })
}

/// A duration as ISO 8601 (`PT10S`), as the configuration takes them.
fn iso(duration: Duration) -> String {
    SignedDuration::try_from(duration)
        .unwrap_or(SignedDuration::MAX)
        .to_string()
}

fn sample(sample: &Sample) -> SystemSample {
    SystemSample {
        at: sample.at.to_string(),
        seconds: sample.seconds,
        steps: sample.steps,
        steps_failed: sample.steps_failed,
        instances_failed: sample.instances_failed,
        latency_p50: sample.latency.map(|latency| latency.p50),
        latency_p99: sample.latency.map(|latency| latency.p99),
        inbox_backlog: sample.backlog.map(|depth| depth.inbox),
        outbox_backlog: sample.backlog.map(|depth| depth.outbox),
        tasks_available: sample.backlog.map(|depth| depth.tasks_available),
        extra: Extra::new(),
    }
}
