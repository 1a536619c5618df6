//! Test support: real `sutra serve` processes, driven the way a user drives them.
//!
//! A [`Server`] is a child process on a free loopback port with its own database file. Tests talk
//! to it over HTTP only, kill it with a real SIGKILL (or freeze it with SIGSTOP), and start it
//! again on the same file — or the same address. A test starts one with [`serve!`] and what it
//! needs besides as [`ServerOptions`] (a fault point, tokens, short leases, …), or has it
//! [`ServerOptions::deployed`] at once. Waits are for conditions with a generous deadline
//! ([`until`]), never fixed sleeps: a slow machine makes a test slower, not red.

mod authority;
mod bearer;
pub mod brokers;
mod log_lines;
pub mod postgres;
pub mod proxy;
mod receiver;

pub use authority::{Authority, Issued};
pub use bearer::Bearer;
pub use log_lines::log_fields;
pub use receiver::{Received, Receiver};

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long any wait may take before the test fails: far above what a healthy run needs.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A scratch directory removed when dropped.
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let unique = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("sutra-test-{name}-{}-{unique}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a scratch directory");
        Scratch { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `sqlite://…/sutra.db` inside the scratch directory.
    pub fn database(&self) -> String {
        format!("sqlite://{}", self.path.join("sutra.db").display())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// [`ServerOptions`] for the `sutra` binary on `datasource`. Cargo names that binary to the
/// integration tests of its own package, at their compile time (`CARGO_BIN_EXE_sutra`), hence a
/// macro: it expands in the test that calls it.
#[macro_export]
macro_rules! serve {
    ($datasource:expr) => {
        $crate::ServerOptions::new(env!("CARGO_BIN_EXE_sutra"), $datasource)
    };
}

/// For each named `async fn(lanes: usize)`, a module of that name holding two tests, `lanes_1`
/// and `lanes_4`, which run it at one engine lane and at four (issue 32): the windows between
/// lanes (group commit, deferred acknowledgement, the hand-off) exist only at several, and the
/// one-lane default must hold too. A failure's test name says the lane count.
#[macro_export]
macro_rules! at_lanes_1_and_4 {
    ($($body:ident),+ $(,)?) => {$(
        mod $body {
            #[tokio::test]
            async fn lanes_1() {
                super::$body(1).await
            }
            #[tokio::test]
            async fn lanes_4() {
                super::$body(4).await
            }
        }
    )+};
}

/// How to start a server: [`serve!`] for the binary under test, then what a test needs
/// besides the defaults, as options.
#[derive(Clone)]
pub struct ServerOptions {
    pub binary: PathBuf,
    pub datasource: String,
    pub env: Vec<(String, String)>,
    /// The address to listen on; by default a free loopback port.
    pub listen: String,
    /// The most files the process may open (`ulimit -n`); by default the test's own limit.
    pub file_limit: Option<u32>,
}

impl ServerOptions {
    pub fn new(binary: impl Into<PathBuf>, datasource: impl Into<String>) -> ServerOptions {
        ServerOptions {
            binary: binary.into(),
            datasource: datasource.into(),
            env: Vec::new(),
            listen: "127.0.0.1:0".to_owned(),
            file_limit: None,
        }
    }

    /// Runs the server with at most `limit` open files, soft and hard (`ulimit -n`), as a
    /// machine with a low limit would.
    pub fn file_limit(mut self, limit: u32) -> ServerOptions {
        self.file_limit = Some(limit);
        self
    }

    /// A later value of the same variable wins.
    pub fn env(mut self, name: &str, value: &str) -> ServerOptions {
        self.env.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Listens on `address`, such as the one a killed predecessor had (see
    /// [`Server::listen_address`]), so that clients of the old process reach the new one.
    pub fn listen(mut self, address: &str) -> ServerOptions {
        address.clone_into(&mut self.listen);
        self
    }

    /// Sets the fault `point` (`SUTRA_FAULT`, `point[@n|@*][:panic|:stop]`): by default the
    /// process kills itself with a real SIGKILL when it gets there.
    pub fn fault(self, point: &str) -> ServerOptions {
        self.env("SUTRA_FAULT", point)
    }

    /// Its replica id: what lease rows, claims and its history log name it by.
    pub fn replica(self, id: &str) -> ServerOptions {
        self.env("SUTRA_REPLICA_ID", id)
    }

    /// Accepts the API tokens `tokens` (`tenant:role:secret; …`), and no request without one.
    pub fn tokens(self, tokens: &str) -> ServerOptions {
        self.env("SUTRA_AUTH_TOKENS", tokens)
    }

    /// Turns on the test build's switches `names` (`SUTRA_TEST_…` variables).
    pub fn switches(self, names: &[impl AsRef<str>]) -> ServerOptions {
        names
            .iter()
            .fold(self, |options, name| options.env(name.as_ref(), "1"))
    }

    /// Runs `lanes` engine lanes.
    pub fn lanes(self, lanes: usize) -> ServerOptions {
        self.env("SUTRA_ENGINE_LANES", &lanes.to_string())
    }

    /// A dead or frozen holder's claim lapses after `timeout`: recovery in seconds, not the
    /// production default's minutes.
    pub fn claim_timeout(self, timeout: Duration) -> ServerOptions {
        self.env("SUTRA_INSTANCE_CLAIM_TIMEOUT", &iso(timeout))
    }

    /// The sweeper looks for lapsed claims every `interval`.
    pub fn sweep_interval(self, interval: Duration) -> ServerOptions {
        self.env("SUTRA_INSTANCE_SWEEP_INTERVAL", &iso(interval))
    }

    /// Leases last `ttl` and are renewed or taken every `poll`.
    pub fn leases(self, ttl: Duration, poll: Duration) -> ServerOptions {
        self.env("SUTRA_LEASE_TTL", &iso(ttl))
            .env("SUTRA_LEASE_POLL", &iso(poll))
    }

    /// Reaches the machine's RabbitMQ: a deployment declaring an amqp channel needs it.
    pub fn amqp(self) -> ServerOptions {
        self.env("SUTRA_TRANSPORTS_AMQP_URL", &brokers::amqp_url())
    }

    /// Reaches the machine's NATS: a deployment declaring a nats channel needs it.
    pub fn nats(self) -> ServerOptions {
        self.env("SUTRA_TRANSPORTS_NATS_URL", &brokers::nats_url())
    }

    /// Starts the server and deploys `yaml` on it, failing the test unless it is accepted.
    pub async fn deployed(&self, yaml: &str) -> Server {
        let server = Server::start(self);
        server.deploy_accepted(yaml).await;
        server
    }
}

/// `duration` as the server's configuration reads one: `PT0.5S`, `PT2S`.
pub fn iso(duration: Duration) -> String {
    format!("PT{}S", duration.as_secs_f64())
}

/// Polls `condition` until it holds, failing the test with `what` after [`PATIENCE`].
pub async fn until(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let held = async || {
        condition()
            .await
            .then_some(())
            .ok_or_else(|| format!("never: {what}"))
    };
    until_ok(held).await;
}

/// Polls `check` until it gives `Ok`, failing the test after [`PATIENCE`] with its last `Err`:
/// what it saw instead.
pub async fn until_ok<T>(mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        match check().await {
            Ok(done) => return done,
            Err(seen) => assert!(Instant::now() < deadline, "{seen}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A running `sutra serve` child process.
pub struct Server {
    child: Child,
    url: String,
    stderr: Arc<Mutex<Vec<String>>>,
    pub http: reqwest::Client,
}

impl Server {
    /// Starts the server and waits until it listens.
    pub fn start(options: &ServerOptions) -> Server {
        Server::try_start(options).unwrap_or_else(|reason| panic!("{reason}"))
    }

    /// Like [`Server::start`], but a server that exits before it listens — as one does when its
    /// database is away — is an `Err` with its stderr, for callers that try again.
    pub fn try_start(options: &ServerOptions) -> Result<Server, String> {
        // This process's HTTP clients — the server's and a test's own — need it.
        sutra_client::install_tls_provider();
        let mut command = match options.file_limit {
            // A shell sets the limit and becomes the server: the same process, so its pid.
            Some(limit) => {
                let mut shell = Command::new("sh");
                shell
                    .arg("-c")
                    .arg(format!("ulimit -n {limit} && exec \"$0\" \"$@\""))
                    .arg(&options.binary);
                shell
            }
            None => Command::new(&options.binary),
        };
        command
            .args([
                "serve",
                "--db",
                &options.datasource,
                "--listen",
                &options.listen,
            ])
            .env("SUTRA_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (name, value) in &options.env {
            command.env(name, value);
        }
        let mut child = command.spawn().expect("start sutra serve");
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let lines = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("piped stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                lines.lock().unwrap().push(line);
            }
        });
        let mut server = Server {
            child,
            url: String::new(),
            stderr,
            http: reqwest::Client::new(),
        };
        let line = server.wait_for_stderr_or_exit("sutra: listening on ")?;
        let url = line
            .split_whitespace()
            .nth(3)
            .expect("the listening line names the url");
        server.url = url.to_owned();
        Ok(server)
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The address it listens on (`127.0.0.1:PORT`), for a successor to listen on
    /// ([`ServerOptions::listen`]).
    pub fn listen_address(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// SIGSTOP: the process stays alive but does nothing at all — no step, no commit, no answer —
    /// as a paused VM or a process starved past every timeout would. [`Server::thaw`] resumes
    /// it; dropping the server kills it frozen or not.
    pub fn freeze(&self) {
        signal(self.pid(), "STOP");
    }

    /// SIGCONT: a frozen process carries on where it stopped, unaware that time passed.
    pub fn thaw(&self) {
        signal(self.pid(), "CONT");
    }

    /// Waits for a stderr line containing `needle` and returns it. Fails the test if the process
    /// exits first or the wait outlasts [`PATIENCE`].
    pub fn wait_for_stderr(&mut self, needle: &str) -> String {
        self.wait_for_stderr_or_exit(needle)
            .unwrap_or_else(|reason| panic!("{reason}"))
    }

    /// Like [`Server::wait_for_stderr`], but the process exiting first is an `Err` saying so.
    fn wait_for_stderr_or_exit(&mut self, needle: &str) -> Result<String, String> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(line) = self
                .stderr
                .lock()
                .unwrap()
                .iter()
                .find(|l| l.contains(needle))
            {
                return Ok(line.clone());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                // Give the reader thread a moment to collect the last lines.
                std::thread::sleep(Duration::from_millis(50));
                if let Some(line) = self
                    .stderr
                    .lock()
                    .unwrap()
                    .iter()
                    .find(|l| l.contains(needle))
                {
                    return Ok(line.clone());
                }
                return Err(format!(
                    "sutra serve exited ({status}) before printing {needle:?}:\n{}",
                    self.stderr_text()
                ));
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on stderr within {PATIENCE:?}:\n{}",
                self.stderr_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stderr_text(&self) -> String {
        self.stderr.lock().unwrap().join("\n")
    }

    /// Waits for the process to exit (for fault points that kill it) and returns whether it was
    /// killed by a signal.
    pub fn wait_for_death(&mut self) -> bool {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code().is_none();
            }
            assert!(
                Instant::now() < deadline,
                "sutra serve did not die within {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no shutdown path runs, as when a machine loses power.
    pub fn kill(&mut self) {
        // `Child::kill` is SIGKILL on Unix.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM and wait: the graceful path.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        self.child.wait().expect("wait for sutra serve")
    }

    pub async fn deploy(&self, yaml: &str) -> (u16, Value) {
        let response = self
            .http
            .post(self.url("/v1/deployments"))
            .body(yaml.to_owned())
            .send()
            .await
            .unwrap();
        status_and_json(response).await
    }

    /// Deploys `yaml`, failing the test unless it is accepted (201); the answer.
    pub async fn deploy_accepted(&self, yaml: &str) -> Value {
        let (status, body) = self.deploy(yaml).await;
        assert_eq!(status, 201, "{body}");
        body
    }

    /// Sends a structured CloudEvent on an HTTP channel.
    pub async fn send(&self, channel: &str, id: &str, data: Value) -> (u16, Value) {
        self.post_raw(
            &format!("/v1/channels/{channel}/messages"),
            event(id, data).to_string(),
        )
        .await
    }

    pub async fn post_raw(&self, path: &str, body: String) -> (u16, Value) {
        self.try_post_raw(path, body)
            .await
            .expect("the server answers")
    }

    /// Like [`Server::post_raw`], but a server that dies mid-request gives `None`.
    pub async fn try_post_raw(&self, path: &str, body: String) -> Option<(u16, Value)> {
        let response = self
            .http
            .post(self.url(path))
            .header("content-type", "application/cloudevents+json")
            .body(body)
            .send()
            .await
            .ok()?;
        Some(status_and_json(response).await)
    }

    /// Sends an event to a server expected to die while handling it.
    pub async fn send_into_fault(&mut self, channel: &str, id: &str, data: Value) {
        let event = event(id, data);
        let answer = self
            .try_post_raw(
                &format!("/v1/channels/{channel}/messages"),
                event.to_string(),
            )
            .await;
        assert!(
            answer.is_none(),
            "the fault point was not reached: {answer:?}"
        );
        assert!(
            self.wait_for_death(),
            "the server was not killed by a signal"
        );
    }

    /// The value of `series` (a name with its labels, as Prometheus renders them) in `/metrics`.
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let response = self.http.get(self.url("/metrics")).send().await.ok()?;
        metric_value(&response.text().await.ok()?, series)
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        status_and_json(self.http.get(self.url(path)).send().await.unwrap()).await
    }

    pub async fn post(&self, path: &str) -> (u16, Value) {
        status_and_json(self.http.post(self.url(path)).send().await.unwrap()).await
    }

    /// POSTs a JSON body (`application/json`).
    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        self.try_post_json(path, body)
            .await
            .expect("the server answers")
    }

    /// Like [`Server::post_json`], but a server that dies mid-request gives `None`.
    pub async fn try_post_json(&self, path: &str, body: &Value) -> Option<(u16, Value)> {
        let response = self
            .http
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .ok()?;
        Some(status_and_json(response).await)
    }

    pub async fn instance(&self, id: &str) -> Value {
        let (status, body) = self.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub async fn history(&self, id: &str) -> Vec<Value> {
        let (status, body) = self.get(&format!("/v1/instances/{id}/history")).await;
        assert_eq!(status, 200, "{body}");
        body.as_array().cloned().unwrap_or_default()
    }

    /// Polls an instance until its status is `status`.
    pub async fn wait_for_status(&self, id: &str, status: &str) -> Value {
        self.wait_for_instance(id, &format!("become {status}"), |i| i["status"] == status)
            .await
    }

    /// Polls an instance until one of its tokens is at `node`.
    pub async fn wait_for_node(&self, id: &str, node: &str) -> Value {
        let at_node = |i: &Value| {
            i["tokens"]
                .as_array()
                .is_some_and(|tokens| tokens.iter().any(|t| t["node"] == node))
        };
        self.wait_for_instance(id, &format!("reach {node}"), at_node)
            .await
    }

    /// Polls an instance until `done` holds for it, failing the test after [`PATIENCE`].
    pub async fn wait_for_instance(
        &self,
        id: &str,
        what: &str,
        done: impl Fn(&Value) -> bool,
    ) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let instance = self.instance(id).await;
            if done(&instance) {
                return instance;
            }
            assert!(
                Instant::now() < deadline,
                "instance {id} did not {what}: {instance}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Waits until the process dies (`true`) or, while it lives, instance `id` reaches `status`
    /// (`false`).
    pub async fn wait_for_death_or_status(&mut self, id: &str, status: &str) -> bool {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            let answer = self
                .http
                .get(self.url(&format!("/v1/instances/{id}")))
                .send()
                .await;
            if let Ok(response) = answer
                && let Ok(instance) = response.json::<Value>().await
                && instance["status"] == status
            {
                return false;
            }
            assert!(
                Instant::now() < deadline,
                "neither died nor saw {id} become {status}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `command` to its end, failing the test with its stderr unless it succeeds; its stdout.
pub fn stdout_of(command: &mut Command) -> String {
    let output = (command.output()).unwrap_or_else(|error| panic!("run {command:?}: {error}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("UTF-8 on stdout")
}

/// Sends `signal` (a name such as `STOP`) to the process `pid`, with the `kill` command: this
/// crate forbids the `unsafe` a direct `kill(2)` would take.
pub fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid} failed: {status}");
}

/// A structured CloudEvent with `data`, as [`Server::send`] sends it; for callers that post
/// events with a client of their own.
pub fn event(id: &str, data: Value) -> Value {
    json!({"specversion": "1.0", "id": id, "type": "test", "source": "sutra-testkit", "data": data})
}

async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// How many events of a history are of `kind` (`"message_received"`, …).
/// The value of `series` in a `/metrics` text.
pub fn metric_value(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

pub fn count_kind(history: &[Value], kind: &str) -> usize {
    history.iter().filter(|event| event["kind"] == kind).count()
}

/// The audit sequence of a history: 1, 2, 3, … with no gap and no duplicate.
pub fn assert_audit_sequence_is_whole(history: &[Value]) {
    let seqs: Vec<u64> = history
        .iter()
        .map(|event| event["seq"].as_u64().expect("seq"))
        .collect();
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "audit sequence has a gap or a duplicate");
}
