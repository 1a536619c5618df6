//! The deployment assets (`deploy/`) against this version: the port, the probe and metrics
//! paths, the configuration keys and the scaling query they name are the ones the server has.
//! Nothing here renders the chart or builds the image (no `helm`, no container daemon on this
//! machine); `.ci/run` parses the YAML and checks the module's formatting.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use sutra_server::config::{env_name, known_keys};
use sutra_store_sql::scaling::SCALING_SIGNAL;
use sutra_testkit::{Server, serve};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

/// Every file under `deploy/`, with its text.
fn assets() -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut pending = vec![deploy()];
    while let Some(directory) = pending.pop() {
        for entry in std::fs::read_dir(&directory).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let text = std::fs::read_to_string(&path).unwrap();
                found.push((path, text));
            }
        }
    }
    found.sort();
    found
}

fn text(relative: &str) -> String {
    std::fs::read_to_string(deploy().join(relative)).unwrap()
}

#[test]
fn every_sutra_variable_the_assets_set_is_a_configuration_key_of_this_version() {
    let known: BTreeSet<String> = known_keys().map(env_name).collect();
    // The log filter is read from the environment alone, not a configuration key.
    let outside_the_configuration = ["SUTRA_LOG"];
    for (path, text) in assets() {
        for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            let named = word.len() > "SUTRA_".len();
            if word.starts_with("SUTRA_") && named && !outside_the_configuration.contains(&word) {
                assert!(
                    known.contains(word),
                    "{} sets {word}, which is no configuration key of this version",
                    path.display()
                );
            }
        }
    }
}

#[test]
fn the_assets_use_the_servers_port_and_paths() {
    let defaults = sutra_server::config::Sources::defaults()
        .settings()
        .unwrap();
    assert_eq!(defaults.listen.port(), 7480, "the port the assets name");
    for (relative, needles) in [
        ("docker/Dockerfile", &["EXPOSE 7480", "/healthz"][..]),
        (
            "helm/sutra/templates/deployment.yaml",
            &[
                "containerPort: 7480",
                "0.0.0.0:7480",
                "path: /readyz",
                "path: /healthz",
            ][..],
        ),
        ("helm/sutra/templates/service.yaml", &["port: 7480"][..]),
        (
            "helm/sutra/templates/servicemonitor.yaml",
            &["path: /metrics"][..],
        ),
        ("modules/sutra/outputs.tf", &[":7480"][..]),
    ] {
        let text = text(relative);
        for needle in needles {
            assert!(text.contains(needle), "{relative} lacks `{needle}`");
        }
    }
}

#[tokio::test]
async fn the_paths_the_probes_and_the_monitor_use_answer() {
    let server = Server::start(&serve!("sqlite::memory:"));
    for path in ["/readyz", "/healthz", "/metrics"] {
        let status = server
            .http
            .get(server.url(path))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200, "{path}");
    }
}

#[test]
fn the_scaled_objects_query_is_the_engines() {
    for relative in [
        "keda/scaledobject.yaml",
        "helm/sutra/templates/scaledobject.yaml",
    ] {
        let text = text(relative);
        let expected = format!("query: \"{SCALING_SIGNAL}\"");
        assert!(
            text.contains(&expected),
            "{relative} does not query SCALING_SIGNAL"
        );
    }
}
