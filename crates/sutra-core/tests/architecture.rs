//! Architecture invariants, read off the resolved dependency graph: the core depends on no async
//! runtime, database or network crate, and every dependency between Sutra's crates points the
//! way ARCHITECTURE.md draws it.
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
    let graph = Graph::of_workspace();
    let reached = graph.reachable("sutra-core");
    let offending: Vec<_> = FORBIDDEN
        .iter()
        .filter(|name| reached.contains(*name))
        .collect();
    assert!(offending.is_empty(), "sutra-core reaches {offending:?}");
}

fn metadata() -> Value {
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
    serde_json::from_slice(&output.stdout).unwrap()
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

/// The direction of every dependency between Sutra's crates, as ARCHITECTURE.md draws it: each
/// crate and the Sutra crates it may depend on directly (normal and build dependencies; a
/// crate's tests may use more). A crate missing here fails the test until it is placed.
const LAYERS: &[(&str, &[&str])] = &[
    ("sutra-core", &[]),
    ("sutra-wire", &[]),
    ("sutra-model", &[]),
    ("sutra-store", &["sutra-core"]),
    ("sutra-store-sql", &["sutra-core", "sutra-store"]),
    (
        "sutra-store-sqlite",
        &["sutra-core", "sutra-store", "sutra-store-sql"],
    ),
    (
        "sutra-store-postgres",
        &["sutra-core", "sutra-store", "sutra-store-sql"],
    ),
    ("sutra-engine", &["sutra-core", "sutra-store"]),
    ("sutra-transport", &["sutra-core", "sutra-store"]),
    ("sutra-client", &["sutra-wire"]),
    (
        "sutra-server",
        &[
            "sutra-core",
            "sutra-wire",
            "sutra-store",
            "sutra-store-sqlite",
            "sutra-store-postgres",
            "sutra-engine",
            "sutra-transport",
        ],
    ),
    (
        "sutra-cli",
        &["sutra-core", "sutra-wire", "sutra-client", "sutra-server"],
    ),
    ("sutra-testkit", &["sutra-store-postgres", "sutra-client"]),
];

/// What must stay out of reach, even transitively: the boundaries ARCHITECTURE.md states as
/// "X knows nothing of Y".
const UNREACHABLE: &[(&str, &[&str])] = &[
    // A transport implements the store seam's `Sender`; it never sees the runtime driving it
    // nor a database.
    (
        "sutra-transport",
        &["sutra-engine", "sutra-store-sqlite", "sutra-store-postgres"],
    ),
    // The engine knows the store only as a trait, and no transport.
    (
        "sutra-engine",
        &[
            "sutra-store-sqlite",
            "sutra-store-postgres",
            "sutra-transport",
            "sutra-server",
        ],
    ),
    // The client is a public boundary: HTTP and the wire vocabulary, nothing of the server.
    (
        "sutra-client",
        &["sutra-core", "sutra-engine", "sutra-store", "sutra-server"],
    ),
];

#[test]
fn crate_dependencies_point_the_way_architecture_md_draws_them() {
    let graph = Graph::of_workspace();
    let mut wrong = Vec::new();
    for member in &graph.members {
        let Some((_, allowed)) = LAYERS.iter().find(|(name, _)| name == member) else {
            wrong.push(format!(
                "{member} is not placed in LAYERS (nor in ARCHITECTURE.md?)"
            ));
            continue;
        };
        for dependency in graph.direct_members(member) {
            if !allowed.contains(&dependency) {
                wrong.push(format!("{member} depends on {dependency}"));
            }
        }
    }
    for (crate_name, forbidden) in UNREACHABLE {
        let reached = graph.reachable(crate_name);
        for name in *forbidden {
            if reached.contains(name) {
                wrong.push(format!("{crate_name} reaches {name}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "dependencies against ARCHITECTURE.md: {wrong:#?}"
    );
}

/// The resolved graph of normal dependencies. Walked by package id (two versions of one crate are
/// two nodes), answered by package name.
struct Graph {
    names: HashMap<String, String>,
    /// Workspace members, by name.
    members: Vec<String>,
    deps: HashMap<String, Vec<String>>,
}

impl Graph {
    fn of_workspace() -> Graph {
        let metadata = metadata();
        let names: HashMap<String, String> = metadata["packages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (string(&p["id"]), string(&p["name"])))
            .collect();
        let members = metadata["workspace_members"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| names[id.as_str().unwrap()].clone())
            .collect();
        let deps = metadata["resolve"]["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|node| {
                let deps = non_dev_dependencies(node).into_iter().map(str::to_owned);
                (string(&node["id"]), deps.collect())
            })
            .collect();
        Graph {
            names,
            members,
            deps,
        }
    }

    fn id(&self, name: &str) -> &str {
        self.names
            .iter()
            .find(|(_, n)| *n == name)
            .map(|(id, _)| id.as_str())
            .unwrap_or_else(|| panic!("no package {name}"))
    }

    fn direct_members<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a str> {
        self.deps[self.id(name)]
            .iter()
            .map(|id| self.names[id].as_str())
            .filter(|dep| self.members.iter().any(|member| member == dep))
    }

    fn reachable(&self, name: &str) -> BTreeSet<&str> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![self.id(name)];
        while let Some(id) = stack.pop() {
            if seen.insert(id) {
                stack.extend(self.deps[id].iter().map(String::as_str));
            }
        }
        seen.remove(self.id(name));
        seen.into_iter().map(|id| self.names[id].as_str()).collect()
    }
}

fn string(value: &Value) -> String {
    value.as_str().unwrap().to_owned()
}

/// The most lines a source file of a crate may have (its `src/`, tests excluded: a test file is
/// read one test at a time). A file past it holds more than one room of the house: split it
/// along the seam it already has, as `expr/tests.rs` and `http/` did.
const SOURCE_FILE_LINES_MAX: usize = 650;

#[test]
fn no_source_file_of_a_crate_is_over_650_lines() {
    let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut over = Vec::new();
    for entry in std::fs::read_dir(&crates).expect("crates/ reads") {
        let src = entry.expect("a crate's entry reads").path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut |path, lines| {
                if lines > SOURCE_FILE_LINES_MAX {
                    over.push(format!("{} ({lines} lines)", path.display()));
                }
            });
        }
    }
    assert!(
        over.is_empty(),
        "over {SOURCE_FILE_LINES_MAX} lines: {over:?}; split each along its seams (a module \
         directory, its unit tests in a tests.rs of their own)"
    );
}

fn rust_files(dir: &std::path::Path, each: &mut impl FnMut(&std::path::Path, usize)) {
    for entry in std::fs::read_dir(dir).expect("a source directory reads") {
        let path = entry.expect("a source entry reads").path();
        if path.is_dir() {
            rust_files(&path, each);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            let text = std::fs::read_to_string(&path).expect("a source file reads");
            each(&path, text.lines().count());
        }
    }
}
