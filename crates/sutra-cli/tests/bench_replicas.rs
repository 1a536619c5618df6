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
    let bench = Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["bench", "start-end", "--db", database.admin_url()])
        .args(["--replicas", "2", "--instances", "40", "--clients", "4"])
        .args(["--max-seconds", "60", "--reference-seconds", "1", "--json"])
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

    let report: Value = serde_json::from_slice(&output.stdout).expect("a JSON report");
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
