//! `GET /v1/system/history` (docs/decisions/0061): the answering replica's pulse — its steps,
//! their latency and its failures over the last fifteen minutes, with the fleet's backlog beside
//! them — as the console's System page draws it. Counts, as `GET /v1/scaling` and `/metrics`
//! carry, never a tenant's rows; behind the administrator's gate like the scaling signal.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use jiff::SignedDuration;
use sutra_engine::pulse::{SAMPLE_INTERVAL, SAMPLES_KEPT, Sample};
use sutra_wire::{Extra, SystemHistory, SystemSample};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new().routes(routes!(history))
}

/// Reads this replica's last fifteen minutes
///
/// One sample every ten seconds, oldest first, kept in the answering replica's memory: its
/// committed steps, its steps that did not commit, the instances its steps failed, its step
/// latency (p50 and p99), and the fleet's backlog as the database counted it then. A replica that
/// started less than fifteen minutes ago has fewer samples (decision 0061).
#[utoipa::path(
    get,
    path = "/v1/system/history",
    operation_id = "systemHistory",
    responses(
        (status = 200, description = "The samples", body = SystemHistory),
    ),
)]
async fn history(State(api): State<Api>) -> Json<SystemHistory> {
    let pulse = api.engine.pulse();
    // SAMPLES_KEPT is 90: it fits a u32.
    let window = SAMPLE_INTERVAL * SAMPLES_KEPT as u32;
    Json(SystemHistory {
        replica: api.engine.config().replica_id.clone(),
        since: pulse.since().to_string(),
        interval: iso(SAMPLE_INTERVAL),
        window: iso(window),
        samples: pulse.samples().iter().map(sample).collect(),
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
