//! The fleet's operations on many instances at once (SPEC §7.2, §8): bulk repair, and the
//! scaling signal an autoscaler reads — the fleet's for the operator, a tenant's own for its
//! administrator (decision 0076).

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, State};
use sutra_core::codes;
use sutra_engine::{Error as EngineError, bulk};
use sutra_wire::Extra;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use super::extract::{Result, invalid, parse};
use super::paging::{instant, page_limit, parse_status};
use crate::auth::{Caller, Viewer};
use crate::openapi::{BadRequest, Conflict, PayloadTooLarge, ServerFailures};
use crate::problem::Problem;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new().routes(routes!(bulk))
}

/// The operator views among them: the scaling signal.
pub(super) fn views() -> OpenApiRouter<Api> {
    OpenApiRouter::new().routes(routes!(scaling))
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
        ServerFailures,
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
    refuse_unconfirmed_cancel_of_all(&body)?;
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

/// A `cancel` whose filter is empty ends every instance of the tenant: taken only when the body
/// says `all`, so that a filter dropped by a script or a typo does not (decision 0081). A dry
/// run acts on nothing, and counts what `all` would cancel.
fn refuse_unconfirmed_cancel_of_all(body: &sutra_wire::BulkBody) -> Result<()> {
    let unfiltered = body.filter == sutra_wire::BulkFilter::default();
    if body.action == "cancel" && unfiltered && !body.all && !body.dry_run {
        return Err(Problem::new(
            codes::CANCEL_UNFILTERED,
            "`filter` is empty: this cancel would end every instance of the tenant",
        ));
    }
    Ok(())
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

/// Reads the scaling signal
///
/// What waits, counted in the database when asked, and the steps in progress on the replica
/// that answered (SPEC §8): every tenant's for a token with the `operator` role (or on a server
/// without tokens), the caller's tenant's alone for one with the `admin` role — its counts, its
/// task topics, its steps in progress, nothing of another tenant's (decision 0076).
#[utoipa::path(
    get,
    path = "/v1/scaling",
    operation_id = "scaling",
    responses(
        (status = 200, description = "The signal", body = sutra_wire::Scaling),
        ServerFailures,
    ),
)]
async fn scaling(
    State(api): State<Api>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Json<sutra_wire::Scaling>> {
    let tenant = viewer.tenant();
    let backlog = api
        .engine
        .backlog(tenant)
        .await
        .map_err(|e| Problem::engine(e, codes::RESUME_CLAIM_HELD))?;
    Ok(Json(sutra_wire::Scaling {
        tenant: tenant.map(str::to_owned),
        inbox_backlog: backlog.inbox,
        outbox_backlog: backlog.outbox,
        tasks_available: backlog.available_by_topic(),
        tasks_locked: backlog.tasks_locked,
        instances: backlog
            .instances
            .into_iter()
            .map(|(status, n)| (status.as_str().to_owned(), n))
            .collect(),
        claims_in_flight: api.engine.claims_in_flight(tenant) as u64,
        extra: Extra::new(),
    }))
}
