//! Architecture invariant: the core depends on no async runtime, database or network crate.
//!
//! Purity is what makes the executor testable exhaustively and model-checkable; a dependency that
//! slips in (even transitively, through a crate's default features) would erode it silently, so
//! the resolved dependency graph is checked rather than the manifest.

use std::collections::{BTreeSet, HashMap};
use std::process::Command;

use serde_json::Value;

/// Crates whose presence means I/O or async machinery reached the core.
const FORBIDDEN: &[&str] = &[
    "tokio",
    "async-std",
    "smol",
    "futures-io",
    "mio",
    "hyper",
    "reqwest",
    "h2",
    "sqlx",
    "rusqlite",
    "libsqlite3-sys",
    "tokio-postgres",
    "postgres",
    "lapin",
    "async-nats",
    "rustls",
    "openssl",
    "socket2",
];

#[test]
fn core_depends_on_no_async_runtime_database_or_network_crate() {
    let output = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
            &host_triple(),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();

    let names: HashMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let normal_deps: HashMap<&str, Vec<&str>> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|node| (node["id"].as_str().unwrap(), non_dev_dependencies(node)))
        .collect();
    let core = names
        .iter()
        .find(|(_, name)| **name == "sutra-core")
        .map(|(id, _)| *id)
        .unwrap();

    let mut reached = BTreeSet::new();
    let mut stack = vec![core];
    while let Some(id) = stack.pop() {
        if reached.insert(names[id]) {
            stack.extend(normal_deps[id].iter().copied());
        }
    }
    let offending: Vec<_> = FORBIDDEN
        .iter()
        .filter(|name| reached.contains(*name))
        .collect();
    assert!(offending.is_empty(), "sutra-core reaches {offending:?}");
}

fn non_dev_dependencies(node: &Value) -> Vec<&str> {
    node["deps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|dep| {
            dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|kind| kind["kind"].as_str() != Some("dev"))
        })
        .map(|dep| dep["pkg"].as_str().unwrap())
        .collect()
}

/// Resolving for the host only keeps `cargo metadata` offline: other platforms' crates are
/// never downloaded.
fn host_triple() -> String {
    let output = Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines()
        .find_map(|line| line.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_owned()
}
