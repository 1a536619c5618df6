//! Instances (SPEC §4, §7.2, §7.4): the listing and one instance with its own rows (history,
//! outbox, tasks), and the administrator's acts on one — cancel, restore, migrate.

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::MethodRouter;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sutra_core::codes;
use sutra_core::snapshot::{Failure, ParkKind, Status, Token};
use sutra_engine::{Error as EngineError, Restored};
use sutra_store::{InstanceFilter, InstanceRecord, OutboxRecord, Store, TaskRecord, WithinBudget};
use sutra_wire::{Extra, InstanceQuery, ListedInstance, Page};
use utoipa::__dev::SchemaReferences;
use utoipa::IntoParams;
use utoipa::openapi::path::Paths;
use utoipa_axum::PathItemExt;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouter};
use utoipa_axum::routes;

use super::Api;
use super::extract::{ApiPath, ApiQuery, Result, parse};
use super::paging::{
    cursor, instant, is_instance_id, next_cursor, page_limit, parent, parse_status,
};
use crate::auth::Caller;
use crate::openapi::{
    BadRequest, Conflict, NotFound, PayloadTooLarge, ServerFailures, Unprocessable,
};
use crate::problem::Problem;
use crate::render;

pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new()
        .routes(routes!(instances))
        .routes(routes!(instance))
        .routes(rows_route::<History>())
        .routes(rows_route::<Outbox>())
        .routes(rows_route::<Tasks>())
        .routes(routes!(cancel))
        .routes(routes!(restore))
        .routes(routes!(migrate))
}

/// The instance a route under `/v1/instances/{id}` acts on.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct InstancePath {
    /// The instance's id.
    id: String,
}

/// Lists instances
///
/// A page at a time: pass a page's `next` as `after` for the next one. Each item is the
/// instance's summary, without its variables and tokens; with `vars=true`, the whole instance.
#[utoipa::path(
    get,
    path = "/v1/instances",
    operation_id = "instances",
    params(InstanceQuery, Shape),
    responses(
        (
            status = 200,
            description = "A page of instances",
            body = Page<sutra_wire::ListedInstance>,
        ),
        (status = 400, response = BadRequest),
        ServerFailures,
    ),
)]
async fn instances(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<InstanceQuery>,
    ApiQuery(shape): ApiQuery<Shape>,
) -> Result<Json<Page<ListedInstance>>> {
    let status = query.status.as_deref().map(parse_status).transpose()?;
    let filter = InstanceFilter {
        status,
        flow: query.flow,
        version: query.version,
        parent: parent(query.parent)?,
        created_before: instant("created_before", query.created_before)?,
        created_after: instant("created_after", query.created_after)?,
        after: cursor(query.after, is_instance_id)?,
        limit: page_limit(query.limit),
    };
    let in_page = InPage {
        failure_code: query.failure_code,
        correlation_key: query.correlation_key,
    };
    let page = match shape.vars {
        Some(true) => whole(&api, &caller.tenant, &filter, &in_page).await,
        _ => summaries(&api, &caller.tenant, &filter, &in_page).await,
    };
    Ok(Json(page?))
}

/// How `GET /v1/instances` answers each instance.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
struct Shape {
    /// `true`: each item is the whole instance, with its variables and tokens, as
    /// `GET /v1/instances/{id}` answers it. Such a page ends, with a `next`, at the instance
    /// whose variables bring the page's to 4 MiB of JSON.
    vars: Option<bool>,
}

/// The most bytes of variables (as JSON) a page of whole instances holds before its last
/// instance: a page of `limit` instances of megabytes each would be read, held and encoded at
/// once otherwise (decision 0081).
const WHOLE_PAGE_VARS_BYTES: usize = 4 << 20;

/// The filters matched within each page the store reads, as a bulk filter matches its failure
/// code: the cursor is the store page's, so a short page can still have a `next`.
struct InPage {
    failure_code: Option<String>,
    correlation_key: Option<String>,
}

impl InPage {
    /// The instance, failed with `failure` and holding `tokens`, is stopped at the failure code
    /// and has a token parked on a `receive` for the correlation key, those asked.
    fn matches(&self, failure: Option<&Failure>, tokens: &[Token]) -> bool {
        let failed_with = |code: &String| failure.is_some_and(|f| &f.code == code);
        let waits_on = |key: &String| {
            tokens.iter().any(|token| {
                matches!(
                    token.park().map(|park| &park.kind),
                    Some(ParkKind::Receive { key: waited, .. }) if waited == key
                )
            })
        };
        self.failure_code.as_ref().is_none_or(failed_with)
            && self.correlation_key.as_ref().is_none_or(waits_on)
    }
}

/// A page of summaries: the tokens are read only to match a correlation key.
async fn summaries(
    api: &Api,
    tenant: &str,
    filter: &InstanceFilter,
    in_page: &InPage,
) -> Result<Page<ListedInstance>> {
    let tokens = in_page.correlation_key.is_some();
    let store = api.engine.store();
    let read = store.instance_summaries(tenant, filter, tokens).await;
    let summaries = read.map_err(Problem::read)?;
    let next = next_cursor(&summaries, filter.limit, |s| &s.id);
    let items = summaries
        .iter()
        .filter(|s| in_page.matches(s.failure.as_ref(), s.tokens.as_deref().unwrap_or_default()))
        .map(|s| ListedInstance::Summary(render::instance_summary(s)));
    Ok(Page {
        items: items.collect(),
        next,
    })
}

/// A page of whole instances, ending early at [`WHOLE_PAGE_VARS_BYTES`].
async fn whole(
    api: &Api,
    tenant: &str,
    filter: &InstanceFilter,
    in_page: &InPage,
) -> Result<Page<ListedInstance>> {
    let store = api.engine.store();
    let read = store.instances(tenant, filter, WHOLE_PAGE_VARS_BYTES).await;
    let WithinBudget { records, spent } = read.map_err(Problem::read)?;
    let next = match records.last() {
        Some(last) if spent => Some(record_id(last).clone()),
        _ => next_cursor(&records, filter.limit, record_id),
    };
    let items = records
        .iter()
        .filter(|r| in_page.matches(r.snapshot.failure.as_ref(), &r.snapshot.tokens))
        .map(|r| render::instance(r).map(ListedInstance::Whole));
    Ok(Page {
        items: items.collect::<Result<_>>()?,
        next,
    })
}

fn record_id(record: &InstanceRecord) -> &String {
    &record.snapshot.instance.id
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
        ServerFailures,
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
        .map_err(Problem::read)?
        .ok_or_else(|| Problem::new(codes::INSTANCE_NOT_FOUND, format!("no instance {id}")))
}

/// The rows an [`InstanceRows`] reads, as the store answers them.
type Rows<'a, R> = BoxFuture<'a, sutra_store::Result<Vec<R>>>;

/// One of an instance's own listings: what it reads from the store and how it answers each row.
/// Each is described by its `#[utoipa::path]` on [`rows`], the one handler serving them all.
trait InstanceRows: utoipa::Path + SchemaReferences + Send + 'static {
    type Row;
    type Item: Serialize;

    fn read<'a>(store: &'a dyn Store, tenant: &'a str, id: &'a str) -> Rows<'a, Self::Row>;

    fn render(row: &Self::Row, id: &str) -> Result<Self::Item>;
}

/// `GET /v1/instances/{id}/history`.
struct History;

impl InstanceRows for History {
    type Row = sutra_core::step::HistoryEvent;
    type Item = sutra_wire::HistoryEvent;

    fn read<'a>(store: &'a dyn Store, tenant: &'a str, id: &'a str) -> Rows<'a, Self::Row> {
        store.history(tenant, id)
    }

    fn render(row: &Self::Row, id: &str) -> Result<Self::Item> {
        render::history_event(row, id)
    }
}

/// `GET /v1/instances/{id}/outbox`.
struct Outbox;

impl InstanceRows for Outbox {
    type Row = OutboxRecord;
    type Item = sutra_wire::OutboxMessage;

    fn read<'a>(store: &'a dyn Store, tenant: &'a str, id: &'a str) -> Rows<'a, Self::Row> {
        store.outbox(tenant, id)
    }

    fn render(row: &Self::Row, _: &str) -> Result<Self::Item> {
        Ok(render::outbox_message(row))
    }
}

/// `GET /v1/instances/{id}/tasks`.
struct Tasks;

impl InstanceRows for Tasks {
    type Row = TaskRecord;
    type Item = sutra_wire::TaskSummary;

    fn read<'a>(store: &'a dyn Store, tenant: &'a str, id: &'a str) -> Rows<'a, Self::Row> {
        store.tasks(tenant, id)
    }

    fn render(row: &Self::Row, _: &str) -> Result<Self::Item> {
        Ok(render::task_summary(row))
    }
}

/// The route of listing `L`: what `routes!` builds for a handler of its own (the schemas its
/// `#[utoipa::path]` names, through the same hidden `SchemaReferences`), here the one handler
/// [`rows`] taking `L` for its type parameter.
fn rows_route<L: InstanceRows>() -> UtoipaMethodRouter<Api> {
    let mut schemas = Vec::new();
    L::schemas(&mut schemas);
    let methods = L::methods();
    let router = methods.iter().fold(MethodRouter::new(), |router, method| {
        router.on(method.to_method_filter(), rows::<L>)
    });
    let mut paths = Paths::new();
    paths.add_path_operation(L::path(), methods, L::operation());
    (schemas, paths, router)
}

/// An instance's rows of listing `L`, once the instance is known to be the caller's: a missing
/// instance is `SUTRA.INSTANCE.NOT_FOUND`, never an empty list.
#[utoipa::path(
    get,
    path = "/v1/instances/{id}/history",
    operation_id = "history",
    impl_for = History,
    summary = "Reads an instance's history",
    description = "Its audit events in sequence order: `seq` starts at 1 and has no gaps.",
    params(InstancePath),
    responses(
        (status = 200, description = "The events", body = Vec<sutra_wire::HistoryEvent>),
        (status = 404, response = NotFound),
        ServerFailures,
    ),
)]
#[utoipa::path(
    get,
    path = "/v1/instances/{id}/outbox",
    operation_id = "outbox",
    impl_for = Outbox,
    summary = "Lists the messages an instance emitted",
    description = "In emission order, with where each stands.",
    params(InstancePath),
    responses(
        (status = 200, description = "The messages", body = Vec<sutra_wire::OutboxMessage>),
        (status = 404, response = NotFound),
        ServerFailures,
    ),
)]
#[utoipa::path(
    get,
    path = "/v1/instances/{id}/tasks",
    operation_id = "instance_tasks",
    impl_for = Tasks,
    summary = "Lists an instance's tasks",
    description = "Every task row its parks made, in whatever state, by park.",
    params(InstancePath),
    responses(
        (status = 200, description = "The tasks", body = Vec<sutra_wire::TaskSummary>),
        (status = 404, response = NotFound),
        ServerFailures,
    ),
)]
async fn rows<L: InstanceRows>(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(InstancePath { id }): ApiPath<InstancePath>,
) -> Result<Json<Vec<L::Item>>> {
    find_instance(&api, &caller, &id).await?;
    let store = api.engine.store().as_ref();
    let rows = L::read(store, &caller.tenant, &id)
        .await
        .map_err(Problem::read)?;
    let items = rows.iter().map(|row| L::render(row, &id));
    Ok(Json(items.collect::<Result<_>>()?))
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
        ServerFailures,
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
        ServerFailures,
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
        ServerFailures,
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
