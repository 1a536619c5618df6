//! The pull surface over HTTP (SPEC §4, §5.5): poll, complete, fail, extend and list external
//! tasks.
//!
//! These are the routes workers in any language call, so every malformed body is refused with
//! `SUTRA.API.REQUEST.INVALID` and a detail naming the field, never with a framework's own
//! rejection; and a lock that no longer holds is `SUTRA.TASK.LOCK.LOST`, which tells the worker
//! to drop its result rather than retry.

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{Extension, Path, Query, State};
use axum::routing::{get, post};
use jiff::{SignedDuration, Timestamp};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use sutra_core::codes;
use sutra_core::duration::parse_duration;
use sutra_core::step::TaskError;
use sutra_engine::tasks::PollRequest;
use sutra_store::{LockedTask, TaskFailure, TaskFilter, TaskPoll, TaskRecord, TaskState};

use crate::auth::Caller;
use crate::http::{Api, next_cursor, page_limit, read_body, store_problem};
use crate::problem::Problem;

type Result<T, E = Problem> = std::result::Result<T, E>;

pub fn routes() -> Router<Api> {
    Router::new()
        .route("/v1/tasks", get(list))
        .route("/v1/tasks/poll", post(poll))
        .route("/v1/tasks/{id}/complete", post(complete))
        .route("/v1/tasks/{id}/fail", post(fail))
        .route("/v1/tasks/{id}/extend", post(extend))
}

#[derive(Deserialize)]
struct PollBody {
    worker: String,
    topics: Vec<String>,
    #[serde(default = "one")]
    max: u32,
    lock: Option<String>,
    wait: Option<String>,
}

fn one() -> u32 {
    1
}

async fn poll(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> Result<Json<Value>> {
    let body: PollBody = parse(&api, body).await?;
    if body.worker.trim().is_empty() {
        return Err(invalid("`worker` must name the worker polling"));
    }
    if body.topics.is_empty() || body.topics.iter().any(|topic| topic.is_empty()) {
        return Err(invalid("`topics` must list at least one topic, none empty"));
    }
    if body.max == 0 {
        return Err(invalid("`max` must be at least 1"));
    }
    let lock = body
        .lock
        .as_deref()
        .map(|lock| lock_duration("lock", lock))
        .transpose()?;
    let wait = body
        .wait
        .as_deref()
        .map(|wait| duration("wait", wait))
        .transpose()?;
    let request = PollRequest {
        poll: TaskPoll {
            tenant: caller.tenant,
            worker: body.worker,
            topics: body.topics,
            max: body.max,
            lock,
        },
        wait: wait.unwrap_or(SignedDuration::ZERO),
    };
    let tasks = api
        .engine
        .poll_tasks(request)
        .await
        .map_err(engine_problem)?;
    Ok(Json(Value::Array(tasks.iter().map(locked_json).collect())))
}

fn locked_json(task: &LockedTask) -> Value {
    json!({
        "id": task.id,
        "topic": task.topic,
        "instance": task.instance,
        "input": task.input,
        "attempt": task.attempt,
        "lock_token": task.lock_token,
        "lock_expires_at": task.lock_expires_at.to_string(),
    })
}

#[derive(Deserialize)]
struct CompleteBody {
    lock_token: String,
    #[serde(default)]
    output: Value,
}

async fn complete(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<Value>> {
    let body: CompleteBody = parse(&api, body).await?;
    api.engine
        .complete_task(&caller.tenant, &id, &body.lock_token, &body.output)
        .await
        .map_err(engine_problem)?;
    Ok(Json(
        json!({"id": id, "state": TaskState::Completed.as_str()}),
    ))
}

#[derive(Deserialize)]
struct FailBody {
    lock_token: String,
    error: ErrorBody,
    /// A worker that says nothing is reporting a technical failure, worth a retry.
    #[serde(default = "yes")]
    retry: bool,
}

#[derive(Deserialize)]
struct ErrorBody {
    code: String,
    #[serde(default)]
    message: String,
}

fn yes() -> bool {
    true
}

async fn fail(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<Value>> {
    let body: FailBody = parse(&api, body).await?;
    if body.error.code.is_empty() {
        return Err(invalid(
            "`error.code` must not be empty: `on-error` routes on it",
        ));
    }
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
    Ok(Json(json!({"id": id, "state": state.as_str()})))
}

#[derive(Deserialize)]
struct ExtendBody {
    lock_token: String,
    lock: String,
}

async fn extend(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> Result<Json<Value>> {
    let body: ExtendBody = parse(&api, body).await?;
    let lock = lock_duration("lock", &body.lock)?;
    let until = api
        .engine
        .extend_task(&caller.tenant, &id, &body.lock_token, lock)
        .await
        .map_err(engine_problem)?;
    Ok(Json(
        json!({"id": id, "lock_expires_at": until.to_string()}),
    ))
}

#[derive(Deserialize)]
struct ListQuery {
    topic: Option<String>,
    state: Option<String>,
    limit: Option<u32>,
    after: Option<String>,
}

async fn list(
    State(api): State<Api>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Value>> {
    let state = query.state.as_deref().map(parse_state).transpose()?;
    let limit = page_limit(query.limit);
    let filter = TaskFilter {
        topic: query.topic,
        state,
        after: query.after,
        limit,
    };
    let records = api
        .engine
        .store()
        .list_tasks(&caller.tenant, &filter)
        .await
        .map_err(store_problem)?;
    let next = next_cursor(&records, limit, |record| &record.id);
    let items: Vec<Value> = records.iter().map(record_json).collect();
    Ok(Json(json!({"items": items, "next": next})))
}

fn record_json(record: &TaskRecord) -> Value {
    json!({
        "id": record.id,
        "topic": record.topic,
        "instance": record.instance,
        "state": record.state.as_str(),
        "attempt": record.attempt,
        "retries": record.retries,
        "worker": record.worker,
        "lock_expires_at": record.locked_until.as_ref().map(Timestamp::to_string),
        "created_at": record.created_at.to_string(),
    })
}

fn parse_state(text: &str) -> Result<TaskState> {
    TaskState::parse(text).ok_or_else(|| {
        invalid(format!(
            "unknown task state `{text}`; use available, locked, completed, failed, terminal or cancelled"
        ))
    })
}

/// Reads a JSON body into `T`, naming the field at fault when it does not fit.
async fn parse<T: DeserializeOwned>(api: &Api, body: Body) -> Result<T> {
    let bytes = read_body(body, api.max_bytes).await?;
    let mut reader = serde_json::Deserializer::from_slice(&bytes);
    serde_path_to_error::deserialize(&mut reader).map_err(|error| {
        let field = error.path().to_string();
        let inner = error.into_inner();
        if field == "." {
            invalid(format!("the body: {inner}"))
        } else {
            invalid(format!("`{field}`: {inner}"))
        }
    })
}

fn duration(field: &str, text: &str) -> Result<SignedDuration> {
    parse_duration(text).map_err(|error| invalid(format!("`{field}`: {error}; {}", error.hint())))
}

/// A lock must last a while, or the task would be available again before the answer arrives.
fn lock_duration(field: &str, text: &str) -> Result<SignedDuration> {
    let lock = duration(field, text)?;
    if lock.is_zero() {
        return Err(invalid(format!(
            "`{field}` must be longer than zero, such as PT1M"
        )));
    }
    Ok(lock)
}

fn invalid(detail: impl Into<String>) -> Problem {
    Problem::new(codes::API_REQUEST_INVALID, detail)
}

/// The task routes never claim an instance, so no claim can be held against them.
fn engine_problem(error: sutra_engine::Error) -> Problem {
    Problem::engine(error, codes::RESUME_CLAIM_HELD)
}
