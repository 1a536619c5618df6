//! The pull surface over HTTP (SPEC §4, §5.5): poll, complete (one or a batch), fail, extend,
//! release and list external tasks.
//!
//! These are the routes workers in any language call, so every malformed body is refused with
//! `SUTRA.API.REQUEST.INVALID` and a detail naming the field, never with a framework's own
//! rejection; and a lock that no longer holds is `SUTRA.TASK.LOCK.LOST`, which tells the worker
//! to drop its result rather than retry.

use axum::Json;
use axum::body::Body;
use axum::extract::{Extension, State};
use futures_util::future::join_all;
use serde::Deserialize;
use sutra_core::step::TaskError;
use sutra_core::{codes, request};
use sutra_engine::tasks::{MAX_TASKS, PollRequest, Take};
use sutra_store::{TaskFailure, TaskFilter, TaskPoll, TaskState};
use sutra_wire::{
    CompleteBody, CompleteItem, CompletedBatch, ExtendBody, Extra, FailBody, ItemResult,
    LockExtended, LockedTask, Page, PollBody, ReleaseBody, TaskQuery, TaskSummary,
};
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::Api;
use super::extract::{ApiPath, ApiQuery, Result, invalid, parse};
use super::paging::{cursor, is_instance_id, next_cursor, page_limit};
use crate::auth::Caller;
use crate::openapi::{BadRequest, Conflict, NotFound, PayloadTooLarge, ServerFailures};
use crate::problem::Problem;
use crate::render;

/// A batch completes at most what one poll can lock. The wire publishes the same number, which
/// clients size their batches by; this keeps the two one number.
const BATCH_MAX: usize = MAX_TASKS as usize;
const _: () = assert!(BATCH_MAX == sutra_wire::COMPLETE_BATCH_MAX);

/// The task a route under `/v1/tasks/{id}` acts on.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct TaskPath {
    /// The task's id, `{instance}:{park}` as a poll answers it.
    id: String,
}

/// The worker routes, each described by its `#[utoipa::path]`.
pub(super) fn routes() -> OpenApiRouter<Api> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(poll))
        .routes(routes!(complete_batch))
        .routes(routes!(complete))
        .routes(routes!(fail))
        .routes(routes!(extend))
        .routes(routes!(release))
}

/// Polls for tasks
///
/// Locks up to `max` available tasks of the given topics for this worker, waiting up to `wait`
/// for one to come (a long poll); an empty array when none came.
#[utoipa::path(
    post,
    path = "/v1/tasks/poll",
    operation_id = "poll_tasks",
    request_body = PollBody,
    responses(
        (status = 200, description = "The tasks locked for this worker", body = Vec<LockedTask>),
        (status = 400, response = BadRequest),
        (status = 413, response = PayloadTooLarge),
        ServerFailures,
    ),
)]
async fn poll(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<Json<Vec<LockedTask>>> {
    let body: PollBody = parse(&api, body).await?;
    let terms = request::poll(
        &body.worker,
        &body.topics,
        body.max,
        body.lock.as_deref(),
        body.wait.as_deref(),
    )
    .map_err(invalid)?;
    let request = PollRequest {
        poll: TaskPoll {
            tenant: caller.tenant,
            worker: body.worker,
            topics: body.topics,
            max: body.max,
            lock: terms.lock,
        },
        wait: terms.wait,
    };
    let tasks = api
        .engine
        .poll_tasks(request)
        .await
        .map_err(engine_problem)?;
    Ok(Json(tasks.iter().map(render::locked_task).collect()))
}

/// Completes a task
///
/// The lock token proves the worker still holds the task; a lock that no longer holds is
/// `SUTRA.TASK.LOCK.LOST`, and the worker should drop its result.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/complete",
    operation_id = "complete_task",
    params(TaskPath),
    request_body = CompleteBody,
    responses(
        (status = 200, description = "Completed", body = sutra_wire::TaskState),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        ServerFailures,
    ),
)]
async fn complete(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(TaskPath { id }): ApiPath<TaskPath>,
    body: Body,
) -> Result<Json<sutra_wire::TaskState>> {
    let body: CompleteBody = parse(&api, body).await?;
    api.engine
        .complete_task(&caller.tenant, &id, &body.lock_token, &body.output, None)
        .await
        .map_err(engine_problem)?;
    Ok(task_state(id, TaskState::Completed))
}

/// Completes a batch of tasks
///
/// At most 100, each on its own: an item's refusal is that item's result, the problem the same
/// completion alone would have answered, and fails no other. A body that is not such an array,
/// or holds more, or an item whose `take` is malformed, is refused whole and completes nothing
/// (decision 0025). An item with `take` is answered with the worker's next task as `taken` when
/// the step its completion resumed armed one of the asked topics (eager dispatch, decision
/// 0038).
#[utoipa::path(
    post,
    path = "/v1/tasks/complete",
    operation_id = "complete_tasks",
    request_body = Vec<CompleteItem>,
    responses(
        (status = 200, description = "One result per item, in order", body = CompletedBatch),
        (status = 400, response = BadRequest),
        (status = 413, response = PayloadTooLarge),
    ),
)]
async fn complete_batch(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<Json<CompletedBatch>> {
    let items: Vec<CompleteItem> = parse(&api, body).await?;
    request::batch(items.len(), BATCH_MAX).map_err(invalid)?;
    let takes = items
        .iter()
        .map(|item| item.take.as_ref().map(take).transpose())
        .collect::<Result<Vec<_>>>()?;
    let completions = items
        .into_iter()
        .zip(takes)
        .map(|(item, take)| complete_item(&api, &caller.tenant, item, take));
    Ok(Json(CompletedBatch {
        items: join_all(completions).await,
        extra: Extra::new(),
    }))
}

async fn complete_item(
    api: &Api,
    tenant: &str,
    item: CompleteItem,
    take: Option<Take>,
) -> ItemResult {
    let completed = api
        .engine
        .complete_task(tenant, &item.id, &item.lock_token, &item.output, take)
        .await
        .map_err(engine_problem);
    render::item_result(item.id, completed)
}

/// An item's ask for the worker's next task, checked as a poll's worker, topics and lock are.
fn take(take: &sutra_wire::Take) -> Result<Take> {
    let lock = request::take(&take.worker, &take.topics, take.lock.as_deref()).map_err(invalid)?;
    Ok(Take {
        worker: take.worker.clone(),
        topics: take.topics.clone(),
        lock,
    })
}

/// Fails a task
///
/// `retry: true` (the default) makes it available again after its backoff, or terminal once
/// out of retries; `retry: false` is a business error its flow handles at once (`on-error`).
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/fail",
    operation_id = "fail_task",
    params(TaskPath),
    request_body = FailBody,
    responses(
        (status = 200, description = "The task's state now", body = sutra_wire::TaskState),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        ServerFailures,
    ),
)]
async fn fail(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(TaskPath { id }): ApiPath<TaskPath>,
    body: Body,
) -> Result<Json<sutra_wire::TaskState>> {
    let body: FailBody = parse(&api, body).await?;
    request::failure_code(&body.error.code).map_err(invalid)?;
    let failure = TaskFailure {
        error: TaskError {
            code: body.error.code,
            message: body.error.message,
        },
        retry: body.retry,
    };
    let state = api
        .engine
        .fail_task(&caller.tenant, &id, &body.lock_token, &failure)
        .await
        .map_err(engine_problem)?;
    Ok(task_state(id, state))
}

fn task_state(id: String, state: TaskState) -> Json<sutra_wire::TaskState> {
    Json(sutra_wire::TaskState {
        id,
        state: state.as_str().to_owned(),
        extra: Extra::new(),
    })
}

/// Hands a task back
///
/// Without spending its attempt: the task is available again at once, on the same attempt, and
/// waiting polls are woken. For a worker stopping before its handler finished, so that another
/// takes the task now rather than when the lock lapses.
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/release",
    operation_id = "release_task",
    params(TaskPath),
    request_body = ReleaseBody,
    responses(
        (status = 200, description = "Available again", body = sutra_wire::TaskState),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        ServerFailures,
    ),
)]
async fn release(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(TaskPath { id }): ApiPath<TaskPath>,
    body: Body,
) -> Result<Json<sutra_wire::TaskState>> {
    let body: ReleaseBody = parse(&api, body).await?;
    api.engine
        .release_task(&caller.tenant, &id, &body.lock_token)
        .await
        .map_err(engine_problem)?;
    Ok(task_state(id, TaskState::Available))
}

/// Extends a task's lock
#[utoipa::path(
    post,
    path = "/v1/tasks/{id}/extend",
    operation_id = "extend_lock",
    params(TaskPath),
    request_body = ExtendBody,
    responses(
        (status = 200, description = "The lock's new expiry", body = LockExtended),
        (status = 400, response = BadRequest),
        (status = 404, response = NotFound),
        (status = 409, response = Conflict),
        (status = 413, response = PayloadTooLarge),
        ServerFailures,
    ),
)]
async fn extend(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiPath(TaskPath { id }): ApiPath<TaskPath>,
    body: Body,
) -> Result<Json<LockExtended>> {
    let body: ExtendBody = parse(&api, body).await?;
    let lock = request::extension(&body.lock).map_err(invalid)?;
    let until = api
        .engine
        .extend_task(&caller.tenant, &id, &body.lock_token, lock)
        .await
        .map_err(engine_problem)?;
    Ok(Json(LockExtended {
        id,
        lock_expires_at: until.to_string(),
        extra: Extra::new(),
    }))
}

/// Lists tasks
///
/// A page at a time: pass a page's `next` as `after` for the next one.
#[utoipa::path(
    get,
    path = "/v1/tasks",
    operation_id = "tasks",
    params(TaskQuery),
    responses(
        (status = 200, description = "A page of tasks", body = Page<TaskSummary>),
        (status = 400, response = BadRequest),
        ServerFailures,
    ),
)]
async fn list(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    ApiQuery(query): ApiQuery<TaskQuery>,
) -> Result<Json<Page<TaskSummary>>> {
    let state = query.state.as_deref().map(parse_state).transpose()?;
    let limit = page_limit(query.limit);
    let filter = TaskFilter {
        topic: query.topic,
        state,
        after: cursor(query.after, is_task_id)?,
        limit,
    };
    let records = api
        .engine
        .store()
        .list_tasks(&caller.tenant, &filter)
        .await
        .map_err(Problem::read)?;
    let next = next_cursor(&records, limit, |record| &record.id);
    let items = records.iter().map(render::task_summary).collect();
    Ok(Json(Page { items, next }))
}

/// A task id, `{instance}:{park}`, as the cursors of the task listing are.
fn is_task_id(text: &str) -> bool {
    sutra_store::task_instance(text).is_some_and(is_instance_id)
}

fn parse_state(text: &str) -> Result<TaskState> {
    TaskState::parse(text).ok_or_else(|| {
        invalid(format!(
            "unknown task state `{text}`; use available, locked, completed, failed, terminal or cancelled"
        ))
    })
}

/// The task routes never claim an instance, so no claim can be held against them.
fn engine_problem(error: sutra_engine::Error) -> Problem {
    Problem::engine(error, codes::RESUME_CLAIM_HELD)
}
