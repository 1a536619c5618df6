//! `sutra bench` on the embedded store: it runs to its end by itself and reports every field,
//! and refuses what it cannot run. Speed is not asserted: this machine's load is not the test's
//! to judge.

use std::process::{Command, Output};

use serde_json::Value;

fn run(extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["bench", "start-end", "--instances", "20", "--clients", "4"])
        .args(extra)
        // An engine of its own: no server named from the environment.
        .env_remove("SUTRA_SERVER")
        .output()
        .expect("sutra runs")
}

fn bench(extra: &[&str]) -> Output {
    let output = run(extra);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

#[test]
fn start_end_runs_to_its_end_and_reports_every_field() {
    let stdout = String::from_utf8(bench(&[]).stdout).unwrap();
    for field in [
        "workload              start-end",
        "instances             20 of 20 completed",
        "instances/s",
        "steps/s",
        "step latency          p50",
        "p99",
        "commits/instance",
        "reference",
        "machine CPU",
    ] {
        assert!(stdout.contains(field), "no `{field}` in:\n{stdout}");
    }
}

#[test]
fn json_report_has_its_shape() {
    let report: Value = serde_json::from_slice(&bench(&["--json"]).stdout).unwrap();
    assert_eq!(report["workload"], "start-end");
    assert_eq!(report["instances_requested"], 20);
    assert_eq!(report["instances_completed"], 20);
    assert_eq!(report["stopped_early"], false);
    assert_eq!(report["lanes"], 1);
    assert_eq!(report["replicas"], 1);
    assert!(report["rate"].is_null(), "a closed loop: {report}");
    for number in ["seconds", "instances_per_second", "steps_per_second"] {
        assert!(report[number].as_f64().is_some_and(|v| v > 0.0), "{report}");
    }
    assert_eq!(report["latency"]["samples"], 20);
    assert!(report["latency"]["p50_ms"].is_f64(), "{report}");
    assert!(report["latency"]["p99_ms"].is_f64(), "{report}");
    assert!(report["latency"]["measured"].is_string(), "{report}");
    // Only fan-out counts items.
    assert!(report["items"].is_null(), "{report}");
    // No PostgreSQL named: no counter and no reference, said as nulls.
    assert!(report["commits"].is_null(), "{report}");
    assert!(report["writes"].is_null(), "{report}");
    assert!(report["reference"].is_null(), "{report}");
    assert!(report["ratio"].is_null(), "{report}");
    // The machine's CPU over the driving time (this is Linux).
    let machine = &report["machine"];
    assert!(
        machine["cores"].as_u64().is_some_and(|n| n >= 1),
        "{report}"
    );
    assert!(machine["busy_cores"].is_f64(), "{report}");
    assert!(machine["cpu_ms_per_instance"].is_f64(), "{report}");
    assert!(machine["measured"].is_string(), "{report}");
}

#[test]
fn an_open_loop_starts_instances_at_its_rate_however_many_run() {
    // 20 instances at 200 per second: the last starts ~0.1 s in, whatever the first do.
    let output = bench(&["--rate", "200", "--json"]);
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["rate"], 200.0);
    assert_eq!(report["instances_completed"], 20);
    assert_eq!(report["latency"]["samples"], 20);
    let stdout = String::from_utf8(bench(&["--rate", "200"]).stdout).unwrap();
    assert!(
        stdout.contains("instances started at 200 per second (open loop)"),
        "{stdout}"
    );
}

#[test]
fn a_rate_that_is_no_rate_is_refused() {
    for rate in ["0", "-5", "NaN", "inf"] {
        let output = run(&[&format!("--rate={rate}")]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "--rate {rate}: {stderr}");
        assert!(stderr.contains("--rate must be"), "--rate {rate}: {stderr}");
    }
}

#[test]
fn replicas_are_refused_without_a_database_or_with_a_server() {
    for (extra, reason) in [
        (&["--replicas", "2"][..], "--replicas needs --db"),
        (
            &["--replicas", "2", "--server", "http://127.0.0.1:9"][..],
            "--server",
        ),
    ] {
        let output = run(extra);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(reason), "{extra:?}: {stderr}");
    }
}

/// Ended instances serve every workload's preload; live ones are `two-tasks`' (parked on its
/// task), so another workload asking for them is refused before anything connects.
#[test]
fn a_preload_is_refused_without_a_database_and_live_instances_for_other_workloads() {
    for (extra, reason) in [
        (&["--preload", "10,10"][..], "needs --db"),
        (
            &[
                "--preload",
                "10,10",
                "--db",
                "postgres://postgres@127.0.0.1:9/x",
            ][..],
            "two-tasks",
        ),
        (&["--preload", "10"][..], "ENDED,LIVE"),
    ] {
        let output = run(extra);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(reason), "{extra:?}: {stderr}");
    }
}

#[test]
fn amqp_start_runs_through_rabbitmq_and_removes_its_queues() {
    // RabbitMQ runs on this machine (.ci/run starts it).
    let child = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "bench",
            "amqp-start",
            "--instances",
            "20",
            "--clients",
            "4",
            "--json",
        ])
        .env_remove("SUTRA_SERVER")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("sutra runs");
    let queues = format!("sutra-bench-{}.", child.id());
    let output = child.wait_with_output().expect("sutra bench ends");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["workload"], "amqp-start");
    assert_eq!(report["instances_completed"], 20, "{report}");
    assert_eq!(report["latency"]["samples"], 20, "{report}");
    let listed = Command::new("rabbitmqctl")
        .args(["-q", "--no-table-headers", "list_queues", "name"])
        .output()
        .expect("rabbitmqctl runs");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(!listed.contains(&queues), "left behind: {listed}");
}

#[test]
fn fan_out_runs_to_its_end_and_reports_its_items() {
    let output = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "bench",
            "fan-out",
            "--items",
            "10",
            "--instances",
            "8",
            "--clients",
            "4",
            "--json",
        ])
        .env_remove("SUTRA_SERVER")
        .output()
        .expect("sutra runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["workload"], "fan-out");
    assert_eq!(report["instances_completed"], 8, "{report}");
    assert_eq!(report["stopped_early"], false, "{report}");
    let items = &report["items"];
    assert_eq!(items["per_instance"], 10, "{report}");
    assert_eq!(items["completed"], 80, "{report}");
    assert!(
        items["per_second"].as_f64().is_some_and(|v| v > 0.0),
        "{report}"
    );
    // The start and 10 completions per instance.
    let (instances, steps) = (
        report["instances_per_second"].as_f64().unwrap(),
        report["steps_per_second"].as_f64().unwrap(),
    );
    assert!((steps - 11.0 * instances).abs() < 1e-6 * steps, "{report}");
    // Two steps a client sees per instance: the start, and the last completion.
    assert_eq!(report["latency"]["samples"], 16, "{report}");
    // No PostgreSQL: no commits to count per item.
    assert!(items["commits_per_item"].is_null(), "{report}");
    assert!(items["ratio"].is_null(), "{report}");
}

#[test]
fn call_runs_its_callers_to_their_end_through_their_children() {
    let output = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args([
            "bench",
            "call",
            "--instances",
            "8",
            "--clients",
            "4",
            "--json",
        ])
        .env_remove("SUTRA_SERVER")
        .output()
        .expect("sutra runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["workload"], "call");
    assert_eq!(report["instances_completed"], 8, "{report}");
    // The caller's start, its child's, and its resume.
    let (instances, steps) = (
        report["instances_per_second"].as_f64().unwrap(),
        report["steps_per_second"].as_f64().unwrap(),
    );
    assert!((steps - 3.0 * instances).abs() < 1e-6 * steps, "{report}");
}

#[test]
fn items_are_refused_for_other_workloads_and_when_none() {
    for (args, reason) in [
        (
            ["bench", "start-end", "--items", "5"],
            "--items is for fan-out only",
        ),
        (
            ["bench", "fan-out", "--items", "0"],
            "--items must be at least 1",
        ),
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_sutra"))
            .args(args)
            .env_remove("SUTRA_SERVER")
            .output()
            .expect("sutra runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(reason), "{args:?}: {stderr}");
    }
}
