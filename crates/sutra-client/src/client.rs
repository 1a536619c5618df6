//! [`Client`]: one typed method per API call the CLI and workers make (SPEC §4).
//!
//! Every method is one request. Nothing here retries: whether a call is safe to repeat depends on
//! what the caller was doing (a lost `complete` answer may have completed the task), so the
//! caller decides, with [`ApiError::is_retryable`] as advice.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, RequestBuilder, StatusCode, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sutra_wire::{
    BulkAnswer, BulkBody, CompleteBody, CompletedBatch, ExtendBody, FailBody, MigrateBody,
    ReleaseBody,
};

use crate::duration::iso8601;
use crate::error::{ApiError, InvalidUrl, TransportError};
use crate::types::{
    Accepted, CloudEvent, CompleteItem, Deployment, HistoryEvent, Instance, InstanceQuery,
    InstanceSummary, ItemResult, Leases, LockExtended, LockedTask, Page, PollRequest, Problem,
    Readiness, Schedule, Schedules, Sent, StatusChange, TaskFailure, TaskQuery, TaskState,
    TaskSummary,
};

/// How long any call but a poll may take: far above a healthy answer, short enough that a
/// wedged connection does not hang a worker or a script forever.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A long poll answers at the end of its `wait`; this covers the trip and a busy server.
const POLL_TIMEOUT_MARGIN: Duration = Duration::from_secs(10);
/// The header naming the instance behind an `ack: complete` reply.
const INSTANCE_HEADER: &str = "sutra-instance";

/// A client for one Sutra server. Cheap to clone; clones share connections.
#[derive(Clone)]
pub struct Client {
    http: reqwest::Client,
    base: Url,
    token: Option<String>,
}

/// Says whether a token is set, never the token: clients end up in workers' debug logs.
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .finish()
    }
}

/// A received answer, before it is decoded.
struct Answer {
    url: String,
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

/// Installs ring as rustls' process-wide crypto provider, unless one is installed already: the
/// HTTP stack is built without one of its own (the workspace standardises on ring), and every
/// HTTP client of the process needs it, `https://` or not. [`Client::new`] calls it; call it
/// before building a `reqwest::Client` of your own in the same process.
pub fn install_tls_provider() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        // An error means another provider is installed: it stays.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

impl Client {
    /// A client for the server at `base_url`, such as `http://127.0.0.1:7480`.
    pub fn new(base_url: &str) -> Result<Client, InvalidUrl> {
        let invalid = |reason: &str| InvalidUrl {
            url: base_url.to_owned(),
            reason: reason.to_owned(),
        };
        let base = Url::parse(base_url).map_err(|error| invalid(&error.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.cannot_be_a_base() {
            return Err(invalid("write it as http://HOST:PORT"));
        }
        install_tls_provider();
        Ok(Client {
            http: reqwest::Client::new(),
            base,
            token: None,
        })
    }

    /// Sends `Authorization: Bearer TOKEN` with every call.
    pub fn with_token(mut self, token: impl Into<String>) -> Client {
        self.token = Some(token.into());
        self
    }

    pub fn base_url(&self) -> &str {
        self.base.as_str()
    }

    /// Deploys a YAML document as the next version of its name. An invalid document is refused
    /// with `SUTRA.DEPLOY.INVALID`, whose `detail` is the rendered diagnostics.
    pub async fn deploy(&self, yaml: &str) -> Result<Deployment, ApiError> {
        self.deploy_file(yaml, None).await
    }

    /// Deploys `yaml` read from `file`: the server names the file in its diagnostics.
    pub async fn deploy_file(
        &self,
        yaml: &str,
        file: Option<&str>,
    ) -> Result<Deployment, ApiError> {
        let mut request = self
            .request(Method::POST, &["v1", "deployments"])
            .header("content-type", "application/yaml")
            .body(yaml.to_owned());
        // A name that cannot travel as a header value is simply not sent.
        if let Some(name) = file.and_then(|f| reqwest::header::HeaderValue::from_str(f).ok()) {
            request = request.header("sutra-file", name);
        }
        decode(self.exchange(request).await?)
    }

    /// Sends a CloudEvent on an `http` channel.
    pub async fn send(&self, channel: &str, event: &CloudEvent) -> Result<Sent, ApiError> {
        let request = self
            .request(Method::POST, &["v1", "channels", channel, "messages"])
            .header("content-type", "application/cloudevents+json")
            .body(event.to_json().to_string());
        let answer = self.exchange(request).await?;
        if answer.status == StatusCode::OK {
            let instance = answer
                .headers
                .get(INSTANCE_HEADER)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            let reply = decode(answer)?;
            Ok(Sent::Replied { instance, reply })
        } else {
            decode::<Accepted>(answer).map(Sent::Accepted)
        }
    }

    /// A page of the instances `query` selects, as summaries: an instance's variables and tokens
    /// are [`Client::instance`]'s to read.
    pub async fn instances(
        &self,
        query: &InstanceQuery,
    ) -> Result<Page<InstanceSummary>, ApiError> {
        let limit = query.limit.map(|n| n.to_string());
        let version = query.version.map(|n| n.to_string());
        let url = with_query(
            self.url(&["v1", "instances"]),
            &[
                ("status", query.status.as_deref()),
                ("flow", query.flow.as_deref()),
                ("version", version.as_deref()),
                ("parent", query.parent.as_deref()),
                ("failure_code", query.failure_code.as_deref()),
                ("correlation_key", query.correlation_key.as_deref()),
                ("created_after", query.created_after.as_deref()),
                ("created_before", query.created_before.as_deref()),
                ("limit", limit.as_deref()),
                ("after", query.after.as_deref()),
            ],
        );
        self.get(url).await
    }

    /// Every version of the tenant's deployments, oldest first.
    pub async fn deployments(&self) -> Result<Page<Deployment>, ApiError> {
        self.get(self.url(&["v1", "deployments"])).await
    }

    /// One version, with its YAML and, if it is draining, what keeps it from retiring.
    pub async fn deployment(&self, name: &str, version: u32) -> Result<Deployment, ApiError> {
        let version = version.to_string();
        self.get(self.url(&["v1", "deployments", name, &version]))
            .await
    }

    pub async fn instance(&self, id: &str) -> Result<Instance, ApiError> {
        self.get(self.url(&["v1", "instances", id])).await
    }

    /// The instance's audit events in sequence order.
    pub async fn history(&self, id: &str) -> Result<Vec<HistoryEvent>, ApiError> {
        self.get(self.url(&["v1", "instances", id, "history"]))
            .await
    }

    /// Ends a live instance as `cancelled`.
    pub async fn cancel(&self, id: &str) -> Result<StatusChange, ApiError> {
        self.post(&["v1", "instances", id, "cancel"], None::<&()>)
            .await
    }

    /// Moves a `suspended` or `failed` instance onto version `to_version` of its deployment, each
    /// token's node mapped by `map` (a node not named keeps its id); answers the instance as it
    /// is after the move.
    pub async fn migrate(
        &self,
        id: &str,
        to_version: u32,
        map: BTreeMap<String, String>,
    ) -> Result<Instance, ApiError> {
        let body = MigrateBody { to_version, map };
        self.post(&["v1", "instances", id, "migrate"], Some(&body))
            .await
    }

    /// One page of a bulk repair: `body`'s action on each instance its filter selects.
    pub async fn bulk(&self, body: &BulkBody) -> Result<BulkAnswer, ApiError> {
        self.post(&["v1", "instances", "bulk"], Some(body)).await
    }

    /// Brings a `failed` instance back to `suspended`, to run its failed node again.
    pub async fn restore(&self, id: &str) -> Result<StatusChange, ApiError> {
        self.post(&["v1", "instances", id, "restore"], None::<&()>)
            .await
    }

    pub async fn tasks(&self, query: &TaskQuery) -> Result<Page<TaskSummary>, ApiError> {
        let limit = query.limit.map(|n| n.to_string());
        let url = with_query(
            self.url(&["v1", "tasks"]),
            &[
                ("topic", query.topic.as_deref()),
                ("state", query.state.as_deref()),
                ("limit", limit.as_deref()),
                ("after", query.after.as_deref()),
            ],
        );
        self.get(url).await
    }

    /// Whether the server can take work (`GET /readyz`): its store answers and no lane is
    /// wedged. A server that is not ready answers a problem.
    pub async fn ready(&self) -> Result<Readiness, ApiError> {
        self.get(self.url(&["readyz"])).await
    }

    /// Who leads which singleton role, and what the answering replica leads.
    pub async fn leases(&self) -> Result<Leases, ApiError> {
        self.get(self.url(&["v1", "leases"])).await
    }

    /// The tenant's scheduled flows: when each fires next and what it fired last.
    pub async fn schedules(&self) -> Result<Schedules, ApiError> {
        self.get(self.url(&["v1", "schedules"])).await
    }

    /// Pauses (`paused`) or resumes a deployment's schedule of `flow`; answers the schedule.
    pub async fn pause_schedule(
        &self,
        deployment: &str,
        flow: &str,
        paused: bool,
    ) -> Result<Schedule, ApiError> {
        let action = if paused { "pause" } else { "resume" };
        self.post(&["v1", "schedules", deployment, flow, action], None::<&()>)
            .await
    }

    /// Locks up to `max` tasks of the given topics, waiting up to `wait` for the first one.
    pub async fn poll(&self, poll: &PollRequest) -> Result<Vec<LockedTask>, ApiError> {
        let request = self
            .request(Method::POST, &["v1", "tasks", "poll"])
            .timeout(poll.wait + POLL_TIMEOUT_MARGIN)
            .json(&poll.to_body());
        decode(self.exchange(request).await?)
    }

    pub async fn complete(
        &self,
        id: &str,
        lock_token: &str,
        output: &Value,
    ) -> Result<TaskState, ApiError> {
        let body = CompleteBody {
            lock_token: lock_token.to_owned(),
            output: output.clone(),
        };
        self.post(&["v1", "tasks", id, "complete"], Some(&body))
            .await
    }

    /// Completes several tasks in one call, each on its own: the answer holds one result per
    /// item, in the items' order, and one item's refusal (a lost lock, an unknown task) is that
    /// item's `error` and fails no other. A batch of more than
    /// [`COMPLETE_BATCH_MAX`](crate::COMPLETE_BATCH_MAX) items is refused whole.
    pub async fn complete_tasks(
        &self,
        items: &[CompleteItem],
    ) -> Result<Vec<ItemResult>, ApiError> {
        let request = self
            .request(Method::POST, &["v1", "tasks", "complete"])
            .json(items);
        let answer = self.exchange(request).await?;
        let (url, status) = (answer.url.clone(), answer.status.as_u16());
        let batch: CompletedBatch = decode(answer)?;
        if !answer_each(items, &batch.items) {
            return Err(ApiError::Unexpected {
                url,
                status,
                reason: "the results do not answer the items one by one, in order".to_owned(),
            });
        }
        Ok(batch.items)
    }

    /// Fails a task. `retry: true` makes it available again after its backoff (or terminal once
    /// out of retries); `retry: false` is a business error the flow handles at once.
    pub async fn fail(
        &self,
        id: &str,
        lock_token: &str,
        error: &TaskFailure,
        retry: bool,
    ) -> Result<TaskState, ApiError> {
        let body = FailBody {
            lock_token: lock_token.to_owned(),
            error: error.clone(),
            retry,
        };
        self.post(&["v1", "tasks", id, "fail"], Some(&body)).await
    }

    /// Keeps the lock for `lock` from now.
    pub async fn extend(
        &self,
        id: &str,
        lock_token: &str,
        lock: Duration,
    ) -> Result<LockExtended, ApiError> {
        let body = ExtendBody {
            lock_token: lock_token.to_owned(),
            lock: iso8601(lock),
        };
        self.post(&["v1", "tasks", id, "extend"], Some(&body)).await
    }

    /// Hands a task back without spending its attempt: another worker may take it at once.
    pub async fn release(&self, id: &str, lock_token: &str) -> Result<TaskState, ApiError> {
        let body = ReleaseBody {
            lock_token: lock_token.to_owned(),
        };
        self.post(&["v1", "tasks", id, "release"], Some(&body))
            .await
    }

    /// The base URL with `segments` appended, each percent-encoded as one path segment.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .expect("Client::new refuses URLs that cannot be a base")
            .pop_if_empty()
            .extend(segments);
        url
    }

    fn request(&self, method: Method, segments: &[&str]) -> RequestBuilder {
        self.authorized(self.http.request(method, self.url(segments)))
    }

    fn authorized(&self, request: RequestBuilder) -> RequestBuilder {
        let request = request.timeout(REQUEST_TIMEOUT);
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    async fn get<T: DeserializeOwned>(&self, url: Url) -> Result<T, ApiError> {
        let request = self.authorized(self.http.get(url));
        decode(self.exchange(request).await?)
    }

    /// A POST with `body` as JSON, or with no body at all.
    async fn post<T: DeserializeOwned>(
        &self,
        segments: &[&str],
        body: Option<&impl Serialize>,
    ) -> Result<T, ApiError> {
        let request = self.request(Method::POST, segments);
        let request = match body {
            Some(body) => request.json(body),
            None => request,
        };
        decode(self.exchange(request).await?)
    }

    /// Sends the request and reads the whole answer; an error status becomes a [`Problem`].
    async fn exchange(&self, request: RequestBuilder) -> Result<Answer, ApiError> {
        let (client, request) = request.build_split();
        let request = request.map_err(|error| transport(self.base.as_str(), error))?;
        let url = request.url().to_string();
        let response = client
            .execute(request)
            .await
            .map_err(|error| transport(&url, error))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|error| transport(&url, error))?
            .to_vec();
        let answer = Answer {
            url,
            status,
            headers,
            body,
        };
        if status.is_success() {
            Ok(answer)
        } else {
            Err(refusal(answer))
        }
    }
}

fn transport(url: &str, error: reqwest::Error) -> ApiError {
    ApiError::Transport(TransportError::new(url, error))
}

/// `url` with the filters that are set as its query; none set leaves no bare `?`.
fn with_query(mut url: Url, filters: &[(&str, Option<&str>)]) -> Url {
    let set: Vec<(&str, &str)> = filters
        .iter()
        .filter_map(|(name, value)| value.map(|value| (*name, value)))
        .collect();
    if !set.is_empty() {
        url.query_pairs_mut().extend_pairs(set);
    }
    url
}

/// Whether `results` answer `items` one by one, in order, which is what lets a caller pair
/// each result with its item.
fn answer_each(items: &[CompleteItem], results: &[ItemResult]) -> bool {
    let answered = results.iter().map(|result| result.id.as_str());
    answered.eq(items.iter().map(|item| item.id.as_str()))
}

fn decode<T: DeserializeOwned>(answer: Answer) -> Result<T, ApiError> {
    serde_json::from_slice(&answer.body).map_err(|error| ApiError::Unexpected {
        url: answer.url,
        status: answer.status.as_u16(),
        reason: format!("the body is not the documented JSON: {error}"),
    })
}

/// An error status: a problem when the body is one, otherwise an unexpected answer (a proxy's
/// error page, or not a Sutra server at all).
fn refusal(answer: Answer) -> ApiError {
    match serde_json::from_slice::<Problem>(&answer.body) {
        Ok(problem) => ApiError::Problem(Box::new(problem)),
        Err(_) => ApiError::Unexpected {
            reason: String::from_utf8_lossy(&answer.body)
                .chars()
                .take(200)
                .collect(),
            url: answer.url,
            status: answer.status.as_u16(),
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            url: "http://sutra.test/v1/x".into(),
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: body.as_bytes().to_vec(),
        }
    }

    #[test]
    fn a_problem_body_keeps_its_code_retry_advice_and_extensions() {
        let body = r#"{"type":"urn:sutra:error:SUTRA.INTAKE.VALIDATION","title":"Message failed validation",
            "status":422,"code":"SUTRA.INTAKE.VALIDATION","detail":"amount is missing","retryable":false,
            "violations":[{"pointer":"/amount","message":"required"}]}"#;
        let error = refusal(answer(422, body));
        assert_eq!(error.code(), Some("SUTRA.INTAKE.VALIDATION"));
        assert!(!error.is_retryable());
        let problem = error.problem().unwrap();
        assert_eq!(problem.status, 422);
        assert_eq!(problem.detail, "amount is missing");
        assert_eq!(problem.extensions["violations"][0]["pointer"], "/amount");
    }

    #[test]
    fn an_error_page_that_is_not_a_problem_is_unexpected() {
        let error = refusal(answer(502, "<html>Bad Gateway</html>"));
        assert!(
            matches!(&error, ApiError::Unexpected { status: 502, reason, .. } if reason.contains("Bad Gateway")),
            "{error:?}"
        );
        assert!(error.is_retryable(), "a gateway error may pass");
        assert_eq!(error.code(), None);
    }

    #[test]
    fn a_success_body_of_the_wrong_shape_is_unexpected() {
        let error = decode::<Accepted>(answer(202, r#"{"hello":"world"}"#)).unwrap_err();
        assert!(matches!(error, ApiError::Unexpected { status: 202, .. }));
    }

    #[test]
    fn batched_results_must_answer_the_items_one_by_one_in_order() {
        let items: Vec<CompleteItem> = ["a:1", "b:1"]
            .map(|id| CompleteItem {
                id: id.into(),
                lock_token: "t".into(),
                output: Value::Null,
                take: None,
            })
            .into();
        let results = |ids: &[&str]| -> Vec<ItemResult> {
            ids.iter()
                .map(|id| serde_json::from_value(json!({"id": id, "state": "completed"})).unwrap())
                .collect()
        };
        assert!(answer_each(&items, &results(&["a:1", "b:1"])));
        assert!(!answer_each(&items, &results(&["b:1", "a:1"])));
        assert!(!answer_each(&items, &results(&["a:1"])));
        assert!(!answer_each(&items, &results(&["a:1", "b:1", "c:1"])));
    }

    #[test]
    fn path_segments_are_encoded_and_appended_to_the_base_path() {
        let client = Client::new("http://127.0.0.1:7480/sutra/").unwrap();
        assert_eq!(
            client
                .url(&["v1", "tasks", "0190-a:3", "complete"])
                .as_str(),
            "http://127.0.0.1:7480/sutra/v1/tasks/0190-a:3/complete"
        );
        assert_eq!(
            client.url(&["v1", "instances", "a/b c"]).as_str(),
            "http://127.0.0.1:7480/sutra/v1/instances/a%2Fb%20c"
        );
    }

    #[test]
    fn a_server_url_without_a_scheme_is_refused() {
        let error = Client::new("localhost:7480").unwrap_err();
        assert_eq!(error.url, "localhost:7480");
        assert!(Client::new("http://localhost:7480").is_ok());
    }

    #[test]
    fn unset_filters_are_left_out_of_the_query() {
        let client = Client::new("http://127.0.0.1:7480").unwrap();
        let url = |filters: &[(&str, Option<&str>)]| {
            with_query(client.url(&["v1", "instances"]), filters).to_string()
        };
        assert_eq!(
            url(&[
                ("status", Some("failed")),
                ("flow", None),
                ("after", Some("a b"))
            ]),
            "http://127.0.0.1:7480/v1/instances?status=failed&after=a+b"
        );
        assert_eq!(url(&[("flow", None)]), "http://127.0.0.1:7480/v1/instances");
    }
}
