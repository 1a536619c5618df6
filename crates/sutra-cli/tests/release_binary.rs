//! The release binary honours no test switch. The crash tests' fault points (`SUTRA_FAULT`), the
//! lane tests' switches (`SUTRA_TEST_MISROUTE`, `SUTRA_TEST_PER_PROCESS_OWNER`) and the history
//! checker's (`SUTRA_TEST_SKIP_FENCE`, `SUTRA_TEST_ACK_BEFORE_COMMIT`, `SUTRA_TEST_STEAL_LOCKS`)
//! break invariants on purpose — one switches off the lane-scoped owner id, one the fence, one
//! answers before the commit, one hands a task held by one worker to another —
//! so they are compiled only into test builds (the `test-hooks` features of `sutra-engine` and
//! `sutra-store-postgres`, enabled by this crate's dev-dependencies alone). This test builds `sutra` as it ships and proves it on the binary:
//! the variables' names are not in it, and a fault that kills the test build does nothing there.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use sutra_testkit::{Server, ServerOptions};

const FLOWS: &str = r#"
name: release
channels:
  orders:
    transport: http
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: done
        end: {}
"#;

/// The first point a start message reaches after its commit.
const FAULT: &str = "after-start-commit";

/// Every variable a test build reads to break an invariant on purpose.
const SWITCHES: &[&str] = &[
    "SUTRA_FAULT",
    "SUTRA_TEST_MISROUTE",
    "SUTRA_TEST_PER_PROCESS_OWNER",
    "SUTRA_TEST_SKIP_FENCE",
    "SUTRA_TEST_ACK_BEFORE_COMMIT",
    "SUTRA_TEST_STEAL_LOCKS",
];

#[tokio::test]
async fn a_release_build_honours_no_test_switch() {
    let release = release_binary();
    let bytes = std::fs::read(&release).expect("read the release binary");
    for switch in SWITCHES {
        assert!(
            !contains(&bytes, switch.as_bytes()),
            "the release binary {} still reads `{switch}`",
            release.display()
        );
    }

    // The control: the test build dies at the fault point, so the message below would kill it.
    let mut doomed = serve(PathBuf::from(env!("CARGO_BIN_EXE_sutra"))).await;
    doomed.send_into_fault("orders", "order-1", json!({})).await;

    // The fault point comes before the reply: an answer is the release build surviving it.
    let server = serve(release).await;
    let (status, body) = server.send("orders", "order-1", json!({})).await;
    assert_eq!(status, 202, "{body}");
}

/// `binary` serving an in-memory database with every switch set, the flows deployed.
async fn serve(binary: PathBuf) -> Server {
    let options = ServerOptions::new(binary, "sqlite::memory:")
        .fault(FAULT)
        .env("SUTRA_TEST_MISROUTE", "1")
        .env("SUTRA_TEST_PER_PROCESS_OWNER", "1")
        .env("SUTRA_TEST_SKIP_FENCE", "1")
        .env("SUTRA_TEST_ACK_BEFORE_COMMIT", "1")
        .env("SUTRA_TEST_STEAL_LOCKS", "1");
    options.deployed(FLOWS).await
}

/// Builds `sutra` as it ships (a no-op when it is up to date) and returns the executable cargo
/// reports, wherever the target directory is (`CARGO_TARGET_DIR`, a config file, the default).
fn release_binary() -> PathBuf {
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut build = Command::new(cargo);
    // Cargo gives this test its own package's variables (`CARGO_PKG_NAME`, `CARGO_MANIFEST_DIR`,
    // …); ring's build script reruns when they differ from the last build's, and with it half
    // the release tree. Without them the build sees what `.ci/run`'s release step saw, and finds
    // the binary current instead of rebuilding it for minutes.
    for (name, _) in std::env::vars_os() {
        if names_this_package(&name.to_string_lossy()) {
            build.env_remove(name);
        }
    }
    let output = build
        .current_dir(&workspace)
        .args([
            "build",
            "--release",
            "--locked",
            "-p",
            "sutra-cli",
            "--bin",
            "sutra",
            "--message-format=json",
        ])
        .output()
        .expect("run cargo build --release");
    assert!(
        output.status.success(),
        "cargo build --release failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .filter(|message| message["target"]["name"] == "sutra")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo reports the sutra executable it built")
}

/// A variable cargo sets for a test of this package, which a nested build must not inherit.
fn names_this_package(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || name.starts_with("CARGO_MANIFEST_")
        || ["CARGO_CRATE_NAME", "CARGO_PRIMARY_PACKAGE", "OUT_DIR"].contains(&name)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
