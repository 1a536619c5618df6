//! API tokens end to end (SPEC §3–§4), on the embedded store: a real `sutra serve` with
//! `sutra.auth.tokens`, refusing what a token does not allow, never printing a token, and
//! refusing to listen beyond loopback without tokens; and the CLI sending its token.

use std::process::{Command, Output};

use serde_json::{Value, json};
use sutra_testkit::{Server, ServerOptions, serve, until_ok};

const ADMIN: &str = "acme-admin-0123456789abcdef";
const WORKER: &str = "acme-worker-0123456789abcdef";
const SENDER: &str = "acme-sender-0123456789abcdef";
/// A well-formed token that no entry holds.
const STRANGER: &str = "stranger-0123456789abcdef";

const FLOWS: &str = r#"
name: shop
channels:
  orders:
    transport: http
    correlate: data.id
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: pick
        task: { topic: pick, input: { order: "= vars.input.id" } }
"#;

fn tokens() -> String {
    format!("acme:admin:{ADMIN}; acme:worker:{WORKER}; acme:sender:{SENDER}")
}

fn guarded(listen: &str) -> ServerOptions {
    serve!("sqlite::memory:").tokens(&tokens()).listen(listen)
}

fn code(body: &Value) -> &str {
    body["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_request_without_an_accepted_token_is_refused_with_401_and_a_challenge() {
    let server = Server::start(&guarded("127.0.0.1:0"));
    let url = server.url("/v1/instances");
    let http = &server.http;

    let attempts = [
        ("no header", http.get(&url)),
        (
            "another scheme",
            http.get(&url).basic_auth("acme", Some(ADMIN)),
        ),
        ("an unknown token", http.get(&url).bearer_auth(STRANGER)),
    ];
    for (what, request) in attempts {
        let response = request.send().await.unwrap();
        let challenge = response.headers().get("www-authenticate").cloned();
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap();
        assert_eq!(
            (status, code(&body)),
            (401, "SUTRA.AUTH.UNAUTHENTICATED"),
            "{what}: {body}"
        );
        let challenge = challenge.unwrap_or_else(|| panic!("{what}: no WWW-Authenticate"));
        assert!(
            challenge
                .to_str()
                .unwrap()
                .starts_with("Bearer realm=\"sutra\""),
            "{what}"
        );
    }
}

#[tokio::test]
async fn a_token_without_the_role_a_call_needs_is_refused_with_403_naming_the_role() {
    let server = Server::start(&guarded("127.0.0.1:0"));
    let event = json!({"specversion": "1.0", "id": "e-1", "type": "t", "source": "s", "data": {"id": "o1"}});
    let poll = json!({"worker": "w", "topics": ["pick"]});

    let refusals = [
        (server.bearer(SENDER).deploy(FLOWS).await, "admin"),
        (server.bearer(WORKER).get("/v1/instances").await, "admin"),
        (
            server
                .bearer(ADMIN)
                .post_json("/v1/tasks/poll", &poll)
                .await,
            "worker",
        ),
        (
            server
                .bearer(SENDER)
                .post_json("/v1/tasks/complete", &json!([]))
                .await,
            "worker",
        ),
        (
            server
                .bearer(ADMIN)
                .post_json("/v1/channels/orders/messages", &event)
                .await,
            "sender",
        ),
    ];
    for ((status, body), role) in refusals {
        assert_eq!(
            (status, code(&body)),
            (403, "SUTRA.AUTH.FORBIDDEN"),
            "{body}"
        );
        let detail = body["detail"].as_str().unwrap();
        assert!(
            detail.contains(&format!("needs the `{role}` role")),
            "{detail}"
        );
    }

    let (status, body) = server.bearer(ADMIN).deploy(FLOWS).await;
    assert_eq!(
        (status, body["tenant"].as_str()),
        (201, Some("acme")),
        "{body}"
    );
    let (status, body) = server
        .bearer(SENDER)
        .send("orders", "e-1", json!({"id": "o1"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = server
        .bearer(WORKER)
        .post_json("/v1/tasks/poll", &poll)
        .await;
    assert_eq!(
        (status, body.as_array().map(Vec::len)),
        (200, Some(1)),
        "{body}"
    );
}

#[tokio::test]
async fn health_endpoints_answer_without_a_token() {
    let server = Server::start(&guarded("127.0.0.1:0"));

    for path in ["/healthz", "/readyz"] {
        let (status, body) = server.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
}

#[tokio::test]
async fn no_token_appears_in_the_servers_logs_even_at_trace_level() {
    let mut server = Server::start(&guarded("127.0.0.1:0").env("SUTRA_LOG", "trace"));
    server.bearer(ADMIN).deploy(FLOWS).await;
    server
        .bearer(SENDER)
        .send("orders", "e-1", json!({"id": "o1"}))
        .await;
    server.bearer(SENDER).deploy(FLOWS).await;
    server.bearer(STRANGER).get("/v1/instances").await;

    server.stop();

    let logs = server.stderr_text();
    assert!(
        logs.contains("API tokens required"),
        "the log says tokens are on:\n{logs}"
    );
    assert!(
        logs.contains("request refused"),
        "refusals are logged:\n{logs}"
    );
    for secret in [ADMIN, WORKER, SENDER, STRANGER] {
        assert!(!logs.contains(secret), "{secret} is in the logs:\n{logs}");
    }
}

#[test]
fn a_listener_beyond_loopback_is_refused_without_tokens() {
    let options = serve!("sqlite::memory:").listen("0.0.0.0:0");

    let refusal = Server::try_start(&options)
        .err()
        .expect("it must refuse to start");

    assert!(
        refusal.contains("refusing to listen on 0.0.0.0:0: it is not a loopback address and no API tokens are configured"),
        "{refusal}"
    );
}

#[tokio::test]
async fn a_listener_beyond_loopback_starts_with_tokens_and_demands_them() {
    let server = Server::start(&guarded("0.0.0.0:0"));
    // Traffic goes to loopback only, on the port the wildcard listener took.
    let port = server.url("").rsplit(':').next().unwrap().to_owned();
    let url = |path: &str| format!("http://127.0.0.1:{port}{path}");

    let health = server.http.get(url("/healthz")).send().await.unwrap();
    let anonymous = server.http.get(url("/v1/instances")).send().await.unwrap();
    let admin = server
        .http
        .get(url("/v1/instances"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();

    assert_eq!(health.status().as_u16(), 200);
    assert_eq!(anonymous.status().as_u16(), 401);
    assert_eq!(admin.status().as_u16(), 200);
}

fn sutra(server: &Server, args: &[&str], token_variable: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_sutra"));
    command
        .args(["--server", server.url("").as_str()])
        .args(args)
        .env_remove("SUTRA_TOKEN");
    if let Some(token) = token_variable {
        command.env("SUTRA_TOKEN", token);
    }
    command.output().expect("run sutra")
}

#[tokio::test]
async fn the_cli_sends_the_token_from_its_flag_or_its_variable_and_explains_a_401() {
    let server = Server::start(&guarded("127.0.0.1:0"));

    let flagged = sutra(&server, &["--token", ADMIN, "instances", "list"], None);
    let from_variable = sutra(&server, &["instances", "list"], Some(ADMIN));
    let without = sutra(&server, &["instances", "list"], None);
    let stranger = sutra(&server, &["--token", STRANGER, "instances", "list"], None);

    for (what, run) in [("--token", &flagged), ("SUTRA_TOKEN", &from_variable)] {
        assert!(
            run.status.success(),
            "{what}: {}",
            String::from_utf8_lossy(&run.stderr)
        );
    }
    for run in [&without, &stranger] {
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains("sutra: SUTRA.AUTH.UNAUTHENTICATED: "),
            "{stderr}"
        );
        assert!(stderr.contains("hint: the server requires an API token: pass it with --token TOKEN, or set SUTRA_TOKEN"), "{stderr}");
        assert!(!stderr.contains(STRANGER), "{stderr}");
    }
}

/// Polls until `token` gets `status` on a call only an admin may make.
async fn until_answered(server: &Server, token: &str, status: u16, why: &str) {
    until_ok(async || {
        let (answered, body) = server.bearer(token).get("/v1/instances").await;
        (answered == status)
            .then_some(())
            .ok_or_else(|| format!("{why}: still {answered} {body}"))
    })
    .await;
}

#[tokio::test]
async fn tokens_from_a_file_are_rotated_without_a_restart_and_never_logged() {
    const NEXT: &str = "acme-admin-rotated-0123456789";
    const LAST: &str = "acme-admin-rotated-again-0123456789";
    let scratch = sutra_testkit::Scratch::new("auth-rotation");
    let file = scratch.path().join("tokens");
    std::fs::write(&file, format!("acme:admin:{ADMIN}")).unwrap();
    let mut server = Server::start(
        &serve!("sqlite::memory:")
            .env("SUTRA_AUTH_TOKENS_FILE", file.to_str().unwrap())
            .env("SUTRA_LOG", "trace"),
    );
    until_answered(&server, ADMIN, 200, "the file's token is in force").await;

    // Rotated, and told so with SIGHUP.
    std::fs::write(&file, format!("acme:admin:{NEXT}")).unwrap();
    sutra_testkit::signal(server.pid(), "HUP");
    until_answered(&server, ADMIN, 401, "the old token stops working").await;
    until_answered(&server, NEXT, 200, "the new token works").await;

    // A file that no longer parses changes nothing.
    std::fs::write(&file, "acme:admin:tiny-secret").unwrap();
    sutra_testkit::signal(server.pid(), "HUP");
    server.wait_for_stderr("API tokens not reloaded");
    until_answered(&server, NEXT, 200, "the tokens in force stay").await;

    // Rotated again, without a signal: the file's change is noticed by itself.
    std::fs::write(&file, format!("acme:admin:{LAST}")).unwrap();
    until_answered(&server, NEXT, 401, "the change is noticed").await;
    until_answered(&server, LAST, 200, "the last token works").await;

    let logs = server.stderr_text();
    assert!(logs.contains("API tokens reloaded"), "{logs}");
    assert!(logs.contains("API tokens not reloaded"), "{logs}");
    for token in [ADMIN, NEXT, LAST, "tiny-secret"] {
        assert!(!logs.contains(token), "a token reached the log: {token}");
    }
}
