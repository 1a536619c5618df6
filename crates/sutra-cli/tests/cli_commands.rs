//! The `sutra` commands that talk to a server, run as a user runs them: the real binary against
//! a real `sutra serve`, checking what they print (tables, blocks, `--json`) and how they exit
//! (0 done, 1 refused by the server, 2 no usable server or input).

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use sutra_testkit::{Scratch, Server, serve};

const SHOP: &str = r#"
name: shop
channels:
  orders:
    transport: http
    schema: { type: object, required: [id] }
    correlate: data.id
  payments:
    transport: http
    correlate: data.order
  quick:
    transport: http
    correlate: data.id
    ack: complete
    ack-timeout: PT20S
  reminders:
    transport: http
    correlate: data.id
  debits:
    transport: http
    correlate: data.id
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: init
        set: { label: "= 'order-' + vars.input.id" }
      - id: pay
        receive: { channel: payments, key: vars.input.id }
        output: payment
      - id: done
        end: {}
  answer:
    start: { channel: quick }
    nodes:
      - id: reply
        end: { reply: { ok: true, id: "= vars.input.id" } }
  reminder:
    start: { channel: reminders }
    nodes:
      - id: ack
        receive: { channel: payments, key: "'r-' + vars.input.id", timeout: PT0.1S }
  debit:
    start: { channel: debits }
    nodes:
      - id: charge
        task: { topic: charge-card, input: { order: "= vars.input.id" } }
"#;

/// What one run of the binary printed and how it exited.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|error| panic!("stdout is not JSON ({error}):\n{}", self.stdout))
    }

    fn succeeded(self) -> Run {
        assert_eq!(self.code, Some(0), "{}{}", self.stdout, self.stderr);
        self
    }
}

impl From<Output> for Run {
    fn from(output: Output) -> Run {
        Run {
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// Runs `sutra ARGS` against `server` (through `SUTRA_SERVER`, as a shell profile would set it).
fn sutra(server: &Server, args: &[&str]) -> Run {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(args)
        .env("SUTRA_SERVER", server.url(""))
        .output()
        .expect("the sutra binary runs")
        .into()
}

/// A server with `SHOP` deployed through `sutra deploy`.
fn shop(scratch: &Scratch) -> Server {
    let server = Server::start(&serve!(scratch.database()));
    let deployed = sutra(&server, &["deploy", &write(scratch, "shop.yaml", SHOP)]).succeeded();
    assert_eq!(deployed.stdout, "deployed shop version 1 (active)\n");
    server
}

fn write(scratch: &Scratch, name: &str, text: &str) -> String {
    let path: PathBuf = scratch.path().join(name);
    std::fs::write(&path, text).expect("write into the scratch directory");
    path.display().to_string()
}

/// Sends an order and returns its instance id, read from `--json`.
fn order(server: &Server, id: &str) -> String {
    let data = format!(r#"{{"id": "{id}"}}"#);
    let sent = sutra(
        server,
        &[
            "send",
            "orders",
            "--id",
            &format!("evt-{id}"),
            "--data",
            &data,
            "--json",
        ],
    )
    .succeeded();
    sent.json()["instance"]
        .as_str()
        .expect("the intake answer names the instance")
        .to_owned()
}

/// The first line of a table and the line that contains `needle`, split into columns.
fn header_and_row(table: &str, needle: &str) -> (Vec<String>, Vec<String>) {
    let columns = |line: &str| line.split_whitespace().map(str::to_owned).collect();
    let header = table.lines().next().expect("a header line");
    let row = table
        .lines()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle} in\n{table}"));
    (columns(header), columns(row))
}

#[tokio::test]
async fn an_instance_shows_in_the_list_the_detail_block_and_the_history_table() {
    let scratch = Scratch::new("cli-tables");
    let server = shop(&scratch);
    let sent = sutra(
        &server,
        &[
            "send",
            "orders",
            "--id",
            "evt-1",
            "--data",
            r#"{"id": "o1"}"#,
        ],
    )
    .succeeded();
    assert!(sent.stdout.starts_with("instance "), "{}", sent.stdout);
    assert!(sent.stdout.ends_with(": suspended\n"), "{}", sent.stdout);
    let id = sent.stdout["instance ".len()..sent.stdout.len() - ": suspended\n".len()].to_owned();

    let list = sutra(&server, &["instances", "list"]).succeeded();
    let (header, row) = header_and_row(&list.stdout, &id);
    assert_eq!(header, ["ID", "FLOW", "VERSION", "STATUS", "UPDATED"]);
    assert_eq!(&row[..4], [id.as_str(), "order", "1", "suspended"]);
    assert!(row[4].ends_with('Z') && !row[4].contains('.'), "{row:?}");
    // The order called nothing: listing its children lists no instance, not every one.
    let children = sutra(&server, &["instances", "list", "--parent", &id]).succeeded();
    assert!(!children.stdout.contains(&id), "{}", children.stdout);

    let show = sutra(&server, &["instances", "show", &id]).succeeded();
    for expected in [
        format!("instance  {id}\n"),
        "flow      order (deployment shop, version 1)\n".to_owned(),
        "status    suspended\n".to_owned(),
        r#""label": "order-o1""#.to_owned(),
        "message on payments with key o1".to_owned(),
    ] {
        assert!(
            show.stdout.contains(&expected),
            "no {expected:?} in\n{}",
            show.stdout
        );
    }

    let history = sutra(&server, &["instances", "history", &id]).succeeded();
    let (header, started) = header_and_row(&history.stdout, "started");
    assert_eq!(header, ["SEQ", "AT", "KIND", "NODE", "DETAIL"]);
    assert_eq!(started[0], "1");
    assert!(
        history.stdout.contains("variables_set"),
        "{}",
        history.stdout
    );
}

#[tokio::test]
async fn json_output_is_the_servers_answers_for_scripts() {
    let scratch = Scratch::new("cli-json");
    let server = shop(&scratch);
    let redeployed = sutra(
        &server,
        &["deploy", &write(&scratch, "shop.yaml", SHOP), "--json"],
    )
    .succeeded()
    .json();
    assert_eq!(redeployed["name"], "shop");
    assert_eq!(redeployed["version"], 2);
    assert_eq!(redeployed["status"], "active");

    let id = order(&server, "o2");
    let list = sutra(
        &server,
        &["--json", "instances", "list", "--status", "suspended"],
    )
    .succeeded()
    .json();
    let items = list["items"].as_array().expect("a page of items");
    assert!(items.iter().any(|item| item["id"] == id.as_str()), "{list}");
    assert!(list.get("next").is_some(), "{list}");

    let instance = sutra(&server, &["instances", "show", &id, "--json"])
        .succeeded()
        .json();
    assert_eq!(instance["id"], id.as_str());
    assert_eq!(instance["vars"]["input"]["id"], "o2");
    assert_eq!(instance["tokens"][0]["park"]["kind"], "receive");
    assert!(
        instance.get("audit_seq").is_some(),
        "members the client does not model pass through: {instance}"
    );

    let history = sutra(&server, &["instances", "history", &id, "--json"])
        .succeeded()
        .json();
    sutra_testkit::assert_audit_sequence_is_whole(history.as_array().expect("a list of events"));

    let cancelled = sutra(&server, &["cancel", &id, "--json"])
        .succeeded()
        .json();
    assert_eq!(cancelled["instance"], id.as_str());
    assert_eq!(cancelled["status"], "cancelled");
}

#[tokio::test]
async fn cancel_ends_a_live_instance_and_cannot_end_it_twice() {
    let scratch = Scratch::new("cli-cancel");
    let server = shop(&scratch);
    let id = order(&server, "o3");

    let cancelled = sutra(&server, &["cancel", &id]).succeeded();
    assert_eq!(cancelled.stdout, format!("instance {id}: cancelled\n"));
    let show = sutra(&server, &["instances", "show", &id]).succeeded();
    assert!(
        show.stdout.contains("status    cancelled\n"),
        "{}",
        show.stdout
    );

    let again = sutra(&server, &["cancel", &id]);
    assert_eq!(again.code, Some(1), "{}", again.stderr);
    assert!(
        again.stderr.contains("SUTRA.ADMIN.STATE.INVALID"),
        "{}",
        again.stderr
    );
    assert!(again.stderr.contains("hint: "), "{}", again.stderr);
}

#[tokio::test]
async fn restore_brings_a_failed_instance_back_to_run_its_node_again() {
    let scratch = Scratch::new("cli-restore");
    let server = shop(&scratch);
    let sent = sutra(
        &server,
        &[
            "send",
            "reminders",
            "--id",
            "evt-r1",
            "--data",
            r#"{"id": "r1"}"#,
            "--json",
        ],
    )
    .succeeded()
    .json();
    let id = sent["instance"].as_str().unwrap().to_owned();
    server.wait_for_status(&id, "failed").await;

    let show = sutra(&server, &["instances", "show", &id]).succeeded();
    assert!(
        show.stdout.contains("status    failed\n"),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout
            .contains("failure   SUTRA.RUNTIME.RECEIVE.TIMEOUT at node ack\n"),
        "{}",
        show.stdout
    );

    let restored = sutra(&server, &["restore", &id]).succeeded();
    assert_eq!(restored.stdout, format!("instance {id}: suspended\n"));
    let history = sutra(&server, &["instances", "history", &id]).succeeded();
    assert!(history.stdout.contains("restored"), "{}", history.stdout);
}

#[tokio::test]
async fn an_ack_complete_channel_prints_the_flows_reply() {
    let scratch = Scratch::new("cli-reply");
    let server = shop(&scratch);
    let replied = sutra(
        &server,
        &[
            "send",
            "quick",
            "--id",
            "evt-q1",
            "--data",
            r#"{"id": "q1"}"#,
        ],
    )
    .succeeded();
    assert!(
        replied.stdout.contains(": completed\nreply:\n"),
        "{}",
        replied.stdout
    );
    assert!(
        replied.stdout.contains(r#""id": "q1""#),
        "{}",
        replied.stdout
    );

    let json = sutra(
        &server,
        &[
            "send",
            "quick",
            "--id",
            "evt-q2",
            "--data",
            r#"{"id": "q2"}"#,
            "--json",
        ],
    )
    .succeeded()
    .json();
    assert_eq!(json["reply"], serde_json::json!({"ok": true, "id": "q2"}));
    assert!(json["instance"].is_string(), "{json}");
}

#[tokio::test]
async fn sending_an_event_id_again_is_reported_as_a_duplicate() {
    let scratch = Scratch::new("cli-dedup");
    let server = shop(&scratch);
    let id = order(&server, "o4");
    let again = sutra(
        &server,
        &[
            "send",
            "orders",
            "--id",
            "evt-o4",
            "--data",
            r#"{"id": "o4"}"#,
        ],
    )
    .succeeded();
    assert!(
        again.stdout.starts_with(&format!("instance {id}: ")),
        "{}",
        again.stdout
    );
    assert!(again.stdout.contains("duplicate"), "{}", again.stdout);
}

#[tokio::test]
async fn an_unknown_instance_exits_1_with_its_code_and_what_to_do() {
    let scratch = Scratch::new("cli-not-found");
    let server = shop(&scratch);

    let shown = sutra(&server, &["instances", "show", "no-such-instance"]);
    assert_eq!(shown.code, Some(1), "{}", shown.stderr);
    assert!(shown.stdout.is_empty(), "{}", shown.stdout);
    assert!(
        shown
            .stderr
            .starts_with("sutra: SUTRA.INSTANCE.NOT_FOUND: no instance no-such-instance\n"),
        "{}",
        shown.stderr
    );
    assert!(
        shown.stderr.contains("hint: No instance has this id"),
        "{}",
        shown.stderr
    );

    let json = sutra(
        &server,
        &["instances", "history", "no-such-instance", "--json"],
    );
    assert_eq!(json.code, Some(1), "{}", json.stderr);
    let problem = json.json();
    assert_eq!(problem["code"], "SUTRA.INSTANCE.NOT_FOUND");
    assert_eq!(problem["status"], 404);
    assert_eq!(problem["retryable"], false);
}

#[tokio::test]
async fn an_invalid_deployment_prints_the_servers_diagnostics_and_exits_1() {
    let scratch = Scratch::new("cli-invalid");
    let server = shop(&scratch);
    let broken = SHOP.replace("end: {}", "end: {}\n        next: nowhere");
    let deployed = sutra(
        &server,
        &["deploy", &write(&scratch, "broken.yaml", &broken)],
    );
    assert_eq!(deployed.code, Some(1), "{}", deployed.stderr);
    assert!(
        deployed.stderr.contains("nowhere") && deployed.stderr.contains("broken.yaml:"),
        "the rendered diagnostics name the user's file:\n{}",
        deployed.stderr
    );
    assert!(
        deployed.stderr.contains("sutra: SUTRA.DEPLOY.INVALID: "),
        "{}",
        deployed.stderr
    );
    assert!(
        deployed.stderr.contains("hint: Fix the errors listed"),
        "{}",
        deployed.stderr
    );
}

#[tokio::test]
async fn a_message_failing_the_channels_schema_lists_its_violations() {
    let scratch = Scratch::new("cli-violations");
    let server = shop(&scratch);
    let sent = sutra(
        &server,
        &[
            "send",
            "orders",
            "--id",
            "evt-bad",
            "--data",
            r#"{"amount": 5}"#,
        ],
    );
    assert_eq!(sent.code, Some(1), "{}", sent.stderr);
    assert!(
        sent.stderr.contains("SUTRA.INTAKE.VALIDATION"),
        "{}",
        sent.stderr
    );
    assert!(sent.stderr.contains("  - "), "{}", sent.stderr);
}

#[test]
fn an_unreachable_server_exits_2_and_says_how_to_start_one() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let run: Run = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["--server", &url, "instances", "list"])
        .output()
        .unwrap()
        .into();
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains(&url), "{}", run.stderr);
    assert!(run.stderr.contains("sutra serve"), "{}", run.stderr);
}

#[test]
fn unusable_input_exits_2_before_asking_any_server() {
    let nowhere = "http://127.0.0.1:9";
    let sent: Run = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "send",
            "orders",
            "--id",
            "e",
            "--data",
            "{not json",
            "--server",
            nowhere,
        ])
        .output()
        .unwrap()
        .into();
    assert_eq!(sent.code, Some(2), "{}", sent.stderr);
    assert!(
        sent.stderr.contains("--data is not JSON"),
        "{}",
        sent.stderr
    );

    let deployed: Run = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["deploy", "no/such/file.yaml", "--server", nowhere])
        .output()
        .unwrap()
        .into();
    assert_eq!(deployed.code, Some(2), "{}", deployed.stderr);
    assert!(
        deployed.stderr.contains("cannot read no/such/file.yaml"),
        "{}",
        deployed.stderr
    );

    let bad_url: Run = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["instances", "list", "--server", "localhost:7480"])
        .output()
        .unwrap()
        .into();
    assert_eq!(bad_url.code, Some(2), "{}", bad_url.stderr);
    assert!(
        bad_url.stderr.contains("http://HOST:PORT"),
        "{}",
        bad_url.stderr
    );
}

#[tokio::test]
async fn tasks_list_shows_the_tasks_waiting_for_workers() {
    let scratch = Scratch::new("cli-tasks");
    let server = shop(&scratch);
    let sent = sutra(
        &server,
        &[
            "send",
            "debits",
            "--id",
            "evt-d1",
            "--data",
            r#"{"id": "d1"}"#,
            "--json",
        ],
    )
    .succeeded()
    .json();
    let instance = sent["instance"].as_str().unwrap().to_owned();

    let list = sutra(&server, &["tasks", "list", "--topic", "charge-card"]).succeeded();
    let (header, row) = header_and_row(&list.stdout, &instance);
    assert_eq!(header, ["ID", "TOPIC", "STATE", "ATTEMPT", "WORKER"]);
    assert_eq!(&row[1..], ["charge-card", "available", "1", "-"]);

    let json = sutra(
        &server,
        &["tasks", "list", "--state", "available", "--json"],
    )
    .succeeded()
    .json();
    assert_eq!(json["items"][0]["instance"], instance.as_str());
    assert_eq!(json["items"][0]["topic"], "charge-card");

    let none = sutra(&server, &["tasks", "list", "--state", "locked"]).succeeded();
    assert_eq!(none.stdout, "no tasks\n");
}
