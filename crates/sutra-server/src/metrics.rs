//! The process's Prometheus recorder and the `GET /metrics` route (SPEC §8): open, unless its
//! series name what tenants chose (`sutra.metrics.tenant-labels`, decision 0076), when it takes
//! the operator's token where tokens are configured.
//!
//! The recorder is global to the process (the `metrics` facade has one slot), so it is installed
//! once, on first use, and shared by every server the process runs — tests run several in one
//! process. Library crates only call the facade; this is the one place that names the exporter.

use std::sync::OnceLock;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use crate::http::Api;
use crate::openapi::{Forbidden, Unauthenticated};

/// Group sizes (decision 0024): up to `sutra.engine.group.max`, whose default is 64.
const GROUP_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0];

/// `sutra_instances`' HELP: on PostgreSQL past 100,000 instances its terminal statuses are
/// estimates (docs/decisions/0057-counts-at-volume.md).
const INSTANCES_HELP: &str = "Instances by status. Exact for created, suspended and failed; on \
     PostgreSQL past 100,000 instances, completed and cancelled are estimates (the table's \
     planner row count less the live ones, split as a sample of its pages has them)";

/// The process's recorder, installed on first call.
fn handle() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        // Without buckets the exporter renders a summary; SPEC §8 asks for a histogram.
        let step_duration = Matcher::Full(sutra_engine::metrics::STEP_DURATION.to_owned());
        let group_members = Matcher::Full(sutra_engine::metrics::GROUP_MEMBERS.to_owned());
        let handle = PrometheusBuilder::new()
            // The buckets the pulse counts in too (decision 0061): the console's quantiles are
            // what `histogram_quantile` gives over these.
            .set_buckets_for_metric(step_duration, &sutra_engine::pulse::STEP_BUCKETS)
            .expect("the step buckets are not empty")
            .set_buckets_for_metric(group_members, GROUP_BUCKETS)
            .expect("the group buckets are not empty")
            .install_recorder()
            .expect("no other metrics recorder is installed in this process");
        sutra_engine::metrics::register();
        metrics::describe_gauge!(sutra_engine::metrics::INSTANCES, INSTANCES_HELP);
        handle
    })
}

/// Installs the recorder before the engine starts, so that nothing it records is lost.
pub fn install() {
    handle();
}

/// Metrics
///
/// Prometheus text format (SPEC §8). The gauges are refreshed first — the in-memory ones, and
/// the backlog as the database counted it within the last 10 s (counted now if not); the rest
/// was recorded as it happened. By default no series names what a tenant chose — flows, task
/// topics, singleton channels are folded — and the route is open. With
/// `sutra.metrics.tenant-labels: true` they carry `tenant` and those names, and a server with
/// tokens asks for one with the `operator` role (decision 0076).
#[utoipa::path(
    get,
    path = "/metrics",
    operation_id = "metrics",
    security((), ("bearer" = [])),
    responses(
        (
            status = 200,
            description = "The metrics",
            body = String,
            content_type = "text/plain; version=0.0.4",
        ),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
    ),
)]
pub(crate) async fn render(State(api): State<Api>) -> impl IntoResponse {
    api.engine.publish_gauges().await;
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle().render(),
    )
}
