//! `sutra bench --replicas` on PostgreSQL: the bench runs its workload over `sutra serve`
//! processes of its own and leaves nothing behind — no replica running, no scratch database.
//! Speed is not asserted: this machine's load is not the test's to judge.

use std::process::{Command, Stdio};

use serde_json::Value;
use sutra_testkit::postgres::{TestDatabase, scalar};

#[tokio::test]
async fn replicas_run_the_workload_to_its_end_and_are_gone_after_it() {
    // The bench makes its scratch database through this admin URL, as it would through
    // `postgres` on the maintenance database.
    let database = TestDatabase::empty().await;
    let (pid, report) = bench(&database, "start-end", 2);
    assert_eq!(report["replicas"], 2, "{report}");
    assert_eq!(report["engine"], "sutra serve replicas (PostgreSQL)");
    assert_eq!(report["instances_requested"], 40);
    assert_eq!(report["instances_completed"], 40, "{report}");
    assert_eq!(report["stopped_early"], false);
    assert!(report["commits"]["total"].is_i64(), "{report}");
    assert!(
        report["reference"]["commits_per_second"].is_f64(),
        "{report}"
    );

    let replicas = processes_naming(&format!("sutra-bench-{pid}-r"));
    assert!(replicas.is_empty(), "replicas left running: {replicas:?}");
    let scratch = format!("sutra_bench_{pid}");
    let left: i64 = scalar(
        database.admin_url(),
        &format!("SELECT count(*) FROM pg_database WHERE datname = '{scratch}'"),
    )
    .await
    .expect("the admin connection answers");
    assert_eq!(left, 0, "the scratch database {scratch} was not dropped");
}

/// `two-tasks` ends most instances on a replica other than the one holding their `ack: complete`
/// caller: the worker takes tasks through whichever replica it polls, where the completion
/// resumes the instance in place. Each caller is answered through its replica's end notices
/// (decision 0024); without them a run waits out its callers' timeouts and fails.
#[tokio::test]
async fn two_tasks_completes_when_instances_end_on_other_replicas_than_their_callers() {
    let database = TestDatabase::empty().await;
    let (_, report) = bench(&database, "two-tasks", 3);
    assert_eq!(report["replicas"], 3, "{report}");
    assert_eq!(report["instances_completed"], 40, "{report}");
    assert_eq!(report["stopped_early"], false, "{report}");
}

/// `--preload` writes its rows before the clock starts, says so per table, and the report has
/// the run's writes beside its commits (issue 35), and its statements where the server counts
/// them (`pg_stat_statements` loaded). Their values are the server's to judge.
#[tokio::test]
async fn a_preloaded_run_reports_its_writes() {
    let database = TestDatabase::empty().await;
    let (_, report, stderr) = run(&database, "two-tasks", &["--preload", "200,50"]);
    assert_eq!(report["instances_completed"], 40, "{report}");
    assert_preloaded(
        &stderr,
        &[
            "preloaded instances (suspended): 50 rows",
            "preloaded tasks (available): 50 rows",
        ],
    );
    let writes = &report["writes"];
    for number in [
        "wal_bytes",
        "updates",
        "hot_updates",
        "index_entries_estimated",
    ] {
        assert!(writes[number].is_i64(), "{number}: {report}");
    }
    for per in [
        "wal_bytes_per_completed_instance",
        "index_entries_per_completed_instance",
    ] {
        assert!(writes[per].is_f64(), "{per}: {report}");
    }
    assert!(writes["counted"].is_string(), "{report}");
    let counts_statements: bool = scalar(
        database.admin_url(),
        "SELECT 'pg_stat_statements' = ANY(string_to_array(
             replace(current_setting('shared_preload_libraries'), ' ', ''), ','))",
    )
    .await
    .unwrap();
    let statements = &writes["statements"];
    match counts_statements {
        false => assert!(statements.is_null(), "{report}"),
        true => {
            // Every instance's steps are statements; plans are counted only if asked.
            assert!(statements["statements"].as_f64().unwrap() > 1.0, "{report}");
            for per in ["plans", "executing_ms", "planning_ms"] {
                assert!(statements[per].as_f64().unwrap() >= 0.0, "{per}: {report}");
            }
        }
    }
}

/// A preload of ended instances alone serves any workload: `relay` runs on top of them.
#[tokio::test]
async fn a_preload_of_ended_instances_serves_another_workload() {
    let database = TestDatabase::empty().await;
    let (_, report, stderr) = run(&database, "relay", &["--preload", "200,0"]);
    assert_eq!(report["instances_completed"], 40, "{report}");
    assert_preloaded(&stderr, &[]);
}

/// The bench said it preloaded 200 ended instances with their rows, then `live` lines, then
/// analyzed the tables.
fn assert_preloaded(stderr: &str, live: &[&str]) {
    let ended = [
        "preloaded instances (completed): 200 rows",
        "preloaded tasks (completed): 400 rows",
        "preloaded history: 1200 rows",
        "preloaded inbox: 200 rows",
    ];
    for line in ended
        .iter()
        .chain(live)
        .chain(&["preloaded VACUUM ANALYZE"])
    {
        assert!(stderr.contains(line), "no `{line}` in:\n{stderr}");
    }
}

/// Runs `sutra bench WORKLOAD` over `replicas` replicas, through `database`'s admin URL, to its
/// end; its pid and its JSON report.
fn bench(database: &TestDatabase, workload: &str, replicas: usize) -> (u32, Value) {
    let replicas = replicas.to_string();
    let (pid, report, _) = run(database, workload, &["--replicas", &replicas]);
    (pid, report)
}

/// Runs `sutra bench WORKLOAD` with `extra` arguments, through `database`'s admin URL, to its
/// end; its pid, its JSON report and its stderr.
fn run(database: &TestDatabase, workload: &str, extra: &[&str]) -> (u32, Value, String) {
    let bench = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["bench", workload, "--db", database.admin_url()])
        .args(extra)
        .args(["--instances", "40"])
        .args(["--clients", "4", "--max-seconds", "60"])
        .args(["--reference-seconds", "1", "--json"])
        .env_remove("SUTRA_SERVER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sutra runs");
    let pid = bench.id();
    let output = bench.wait_with_output().expect("sutra bench ends");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report = serde_json::from_slice(&output.stdout).expect("a JSON report");
    (
        pid,
        report,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The command lines of the live processes that contain `needle`: the bench names its
/// replicas `sutra-bench-{its pid}-r{index}` on theirs.
fn processes_naming(needle: &str) -> Vec<String> {
    std::fs::read_dir("/proc")
        .expect("/proc lists the processes")
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter_map(|entry| std::fs::read(entry.path().join("cmdline")).ok())
        .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        .filter(|cmdline| cmdline.contains(needle))
        .collect()
}
