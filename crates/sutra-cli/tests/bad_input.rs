//! Hostile input through every surface, on both stores at once (issue 18). A random value — a
//! NUL, a lone surrogate, a huge string, deep nesting, a huge number, or an ordinary one — is put
//! where one field of a request would be, and the request is sent to a SQLite and a PostgreSQL
//! `sutra serve` alike. Each is answered the same by both, with the same problem code when
//! refused, and never with a 5xx: a value one store cannot hold is refused at the door, not as a
//! retryable outage. The cases are seeded (proptest's deterministic runner) and bounded; a failing
//! one is printed with the surface, the value and both answers.

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, serve};

const DEPLOYMENT: &str = r#"
name: hostile
channels:
  orders:
    transport: http
    correlate: data.id
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: work
        task: { topic: work, input: { n: "= vars.input.id" }, retries: 0 }
      - id: done
        end: {}
"#;

/// Requests per surface: enough to draw every kind of value several times.
const CASES: u32 = 24;

/// A JSON value as raw text, to stand where a field's value would: some that JSON cannot carry
/// (a lone surrogate, a number out of range, nesting past the parser's depth), some that a store
/// cannot (NUL, strings too long to index), and ordinary ones.
fn hostile() -> impl Strategy<Value = String> {
    let fixed = prop_oneof![
        Just(r#""a\u0000b""#.to_owned()),
        Just(r#""\ud800""#.to_owned()),
        Just(r#""x\udc00y""#.to_owned()),
        Just("1e400".to_owned()),
        Just("-1e400".to_owned()),
        Just("18446744073709551616".to_owned()),
        Just("123456789012345678901234567890".to_owned()),
        Just("-0".to_owned()),
        Just("1.5".to_owned()),
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("{}".to_owned()),
        Just("[]".to_owned()),
        Just(r#""ü€😀""#.to_owned()),
        Just(r#""""#.to_owned()),
    ];
    let long = prop_oneof![Just(1_025usize), Just(3_000), Just(300_000)]
        .prop_map(|n| format!("\"{}\"", "k".repeat(n)));
    let deep = prop_oneof![Just(64usize), Just(200), Just(5_000)]
        .prop_map(|depth| format!("{}1{}", "[".repeat(depth), "]".repeat(depth)));
    let text = "[\\PC]{0,24}".prop_map(|text| Value::String(text).to_string());
    prop_oneof![4 => fixed, 2 => long, 1 => deep, 2 => text]
}

/// Where the value goes.
#[derive(Debug, Clone, Copy)]
enum Surface {
    MessageId,
    MessageType,
    MessageSource,
    MessageSubject,
    MessageData,
    MessageKey,
    PollWorker,
    PollTopic,
    PollMax,
    CompleteToken,
    CompleteOutput,
    BatchOutput,
    FailCode,
    FailMessage,
    ExtendLock,
    BulkFlow,
    MigrateVersion,
    DeploymentName,
    ListFlow,
    ListStatus,
    TaskListTopic,
    InstancePath,
}

const SURFACES: [Surface; 22] = [
    Surface::MessageId,
    Surface::MessageType,
    Surface::MessageSource,
    Surface::MessageSubject,
    Surface::MessageData,
    Surface::MessageKey,
    Surface::PollWorker,
    Surface::PollTopic,
    Surface::PollMax,
    Surface::CompleteToken,
    Surface::CompleteOutput,
    Surface::BatchOutput,
    Surface::FailCode,
    Surface::FailMessage,
    Surface::ExtendLock,
    Surface::BulkFlow,
    Surface::MigrateVersion,
    Surface::DeploymentName,
    Surface::ListFlow,
    Surface::ListStatus,
    Surface::TaskListTopic,
    Surface::InstancePath,
];

/// A request: a `GET` of its path when it has no body, else a `POST` of the body.
struct Request {
    path: String,
    body: Option<String>,
}

impl Surface {
    fn needs_a_task(self) -> bool {
        matches!(
            self,
            Surface::CompleteToken
                | Surface::CompleteOutput
                | Surface::BatchOutput
                | Surface::FailCode
                | Surface::FailMessage
                | Surface::ExtendLock
        )
    }

    /// The request carrying `value`, case `n`, against a server whose locked task (if the
    /// surface needs one) is `task`.
    fn request(self, value: &str, n: usize, task: Option<&(String, String)>) -> Request {
        let (task_id, token) = task
            .map(|(id, token)| (id.clone(), Value::String(token.clone()).to_string()))
            .unwrap_or_default();
        let message = |field: &str| {
            let mut fields = vec![
                ("specversion", r#""1.0""#.to_owned()),
                ("id", format!(r#""e-{n}""#)),
                ("type", r#""order.placed""#.to_owned()),
                ("source", r#""bad-input""#.to_owned()),
                ("data", format!(r#"{{"id": "k-{n}"}}"#)),
            ];
            match field {
                "subject" => fields.push(("subject", value.to_owned())),
                "key" => fields[4].1 = format!(r#"{{"id": {value}}}"#),
                field => {
                    let slot = fields.iter_mut().find(|(name, _)| *name == field).unwrap();
                    slot.1 = value.to_owned();
                }
            }
            let body = fields
                .iter()
                .map(|(name, value)| format!(r#""{name}": {value}"#))
                .collect::<Vec<_>>()
                .join(", ");
            Request {
                path: "/v1/channels/orders/messages".into(),
                body: Some(format!("{{{body}}}")),
            }
        };
        let post = |path: String, body: String| Request {
            path,
            body: Some(body),
        };
        let get = |path: String| Request { path, body: None };
        match self {
            Surface::MessageId => message("id"),
            Surface::MessageType => message("type"),
            Surface::MessageSource => message("source"),
            Surface::MessageSubject => message("subject"),
            Surface::MessageData => message("data"),
            Surface::MessageKey => message("key"),
            Surface::PollWorker => post(poll_path(), poll(value, r#"["work"]"#, "1")),
            Surface::PollTopic => post(poll_path(), poll(r#""w""#, &format!("[{value}]"), "1")),
            Surface::PollMax => post(poll_path(), poll(r#""w""#, r#"["nothing"]"#, value)),
            Surface::CompleteToken => post(
                format!("/v1/tasks/{task_id}/complete"),
                format!(r#"{{"lock_token": {value}, "output": {{}}}}"#),
            ),
            Surface::CompleteOutput => post(
                format!("/v1/tasks/{task_id}/complete"),
                format!(r#"{{"lock_token": {token}, "output": {{"v": {value}}}}}"#),
            ),
            Surface::BatchOutput => post(
                "/v1/tasks/complete".into(),
                format!(r#"[{{"id": "{task_id}", "lock_token": {token}, "output": {value}}}]"#),
            ),
            Surface::FailCode => post(
                format!("/v1/tasks/{task_id}/fail"),
                format!(
                    r#"{{"lock_token": {token}, "error": {{"code": {value}, "message": "m"}}, "retry": false}}"#
                ),
            ),
            Surface::FailMessage => post(
                format!("/v1/tasks/{task_id}/fail"),
                format!(
                    r#"{{"lock_token": {token}, "error": {{"code": "C.D", "message": {value}}}, "retry": false}}"#
                ),
            ),
            Surface::ExtendLock => post(
                format!("/v1/tasks/{task_id}/extend"),
                format!(r#"{{"lock_token": {token}, "lock": {value}}}"#),
            ),
            Surface::BulkFlow => post(
                "/v1/instances/bulk".into(),
                format!(r#"{{"action": "cancel", "filter": {{"flow": {value}}}, "limit": 1}}"#),
            ),
            Surface::MigrateVersion => post(
                "/v1/instances/nope/migrate".into(),
                format!(r#"{{"to_version": {value}}}"#),
            ),
            Surface::DeploymentName => post(
                "/v1/deployments".into(),
                DEPLOYMENT.replace("name: hostile", &format!("name: {value}")),
            ),
            Surface::ListFlow => get(format!("/v1/instances?flow={}", encoded(value))),
            Surface::ListStatus => get(format!("/v1/instances?status={}", encoded(value))),
            Surface::TaskListTopic => get(format!("/v1/tasks?topic={}", encoded(value))),
            Surface::InstancePath => get(format!("/v1/instances/{}", encoded(value))),
        }
    }
}

/// The value as a URL would carry it: a JSON string's text (its raw text if it has none), cut to
/// 4,000 bytes (a URL longer than 64 KiB is refused by the client itself), every byte but
/// letters and digits percent-encoded.
fn encoded(value: &str) -> String {
    let text = serde_json::from_str::<String>(value).unwrap_or_else(|_| value.to_owned());
    text.bytes()
        .take(4_000)
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' => char::from(byte).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn poll_path() -> String {
    "/v1/tasks/poll".into()
}

fn poll(worker: &str, topics: &str, max: &str) -> String {
    format!(r#"{{"worker": {worker}, "topics": {topics}, "max": {max}, "wait": "PT0S"}}"#)
}

/// What an answer is compared by: its status, and a problem's code.
fn answer(status: u16, body: &Value) -> (u16, Option<String>) {
    (status, body["code"].as_str().map(str::to_owned))
}

struct Stores {
    sqlite: Server,
    postgres: Server,
    _scratch: Scratch,
    _database: TestDatabase,
}

impl Stores {
    async fn start() -> Stores {
        let scratch = Scratch::new("bad-input");
        let database = TestDatabase::create().await;
        Stores {
            sqlite: serve!(scratch.database()).deployed(DEPLOYMENT).await,
            postgres: serve!(database.url()).deployed(DEPLOYMENT).await,
            _scratch: scratch,
            _database: database,
        }
    }

    fn both(&self) -> [&Server; 2] {
        [&self.sqlite, &self.postgres]
    }
}

/// Starts an instance on `server` and locks its task: `(id, lock token)`.
async fn locked_task(server: &Server, n: usize) -> (String, String) {
    let (status, body) = server
        .send("orders", &format!("t-{n}"), json!({"id": format!("t-{n}")}))
        .await;
    assert!(status < 300, "{status} {body}");
    let poll = json!({"worker": "w", "topics": ["work"], "max": 1, "wait": "PT10S"});
    let (status, tasks) = server.post_json("/v1/tasks/poll", &poll).await;
    assert_eq!(status, 200, "{tasks}");
    let task = &tasks[0];
    (
        task["id"].as_str().unwrap().to_owned(),
        task["lock_token"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_values_are_answered_alike_by_both_stores_and_never_with_a_5xx() {
    let stores = Stores::start().await;
    let http = reqwest::Client::new();
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases: CASES,
            failure_persistence: None,
            ..Config::default()
        },
        TestRng::deterministic_rng(RngAlgorithm::ChaCha),
    );
    let mut n = 0;
    let mut divergent = Vec::new();
    for surface in SURFACES {
        for _ in 0..CASES {
            let value = hostile().new_tree(&mut runner).expect("a value").current();
            n += 1;
            let mut answers = Vec::new();
            for server in stores.both() {
                let task = if surface.needs_a_task() {
                    Some(locked_task(server, n).await)
                } else {
                    None
                };
                let request = surface.request(&value, n, task.as_ref());
                let url = server.url(&request.path);
                let call = match request.body {
                    Some(body) => http
                        .post(url)
                        .header("content-type", "application/json")
                        .body(body),
                    None => http.get(url),
                };
                let response = call.send().await.expect("the server answers");
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
                answers.push((answer(status, &body), body));
            }
            let [(sqlite, sqlite_body), (postgres, postgres_body)] =
                <[_; 2]>::try_from(answers).unwrap_or_else(|_| unreachable!("two stores"));
            if sqlite != postgres || sqlite.0 >= 500 || postgres.0 >= 500 {
                let shown: String = value.chars().take(80).collect();
                divergent.push(format!(
                    "{surface:?} with {shown} ({} bytes): SQLite {sqlite:?} {}, PostgreSQL \
                     {postgres:?} {}",
                    value.len(),
                    excerpt(&sqlite_body),
                    excerpt(&postgres_body),
                ));
            }
        }
    }
    assert!(
        divergent.is_empty(),
        "{} of {n} requests were answered apart or with a 5xx:\n{}",
        divergent.len(),
        divergent.join("\n")
    );
}

fn excerpt(body: &Value) -> String {
    body.to_string().chars().take(300).collect()
}
