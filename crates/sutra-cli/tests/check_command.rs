//! `sutra check` as a user runs it: exit codes, the summary line, and the JSON form.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn sutra_check(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sutra"))
        .arg("check")
        .args(args)
        .current_dir(repository())
        .output()
        .expect("the sutra binary runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn examples() -> Vec<String> {
    let mut examples: Vec<String> = std::fs::read_dir(repository().join("examples"))
        .expect("examples/ exists")
        .map(|entry| entry.expect("readable directory").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .map(|path| format!("examples/{}", path.file_name().unwrap().to_string_lossy()))
        .collect();
    examples.sort();
    examples
}

const MALFORMED: &str = "crates/sutra-core/tests/malformed/16-dangling-next.yaml";

#[test]
fn every_example_checks_cleanly() {
    let examples = examples();
    assert!(examples.len() >= 3);
    let args: Vec<&str> = examples.iter().map(String::as_str).collect();
    let output = sutra_check(&args);
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("examples/money-transfer.yaml: ok (1 flow, 3 channels)"),
        "{}",
        stdout(&output)
    );
}

#[test]
fn a_malformed_document_exits_1_with_located_errors_and_a_summary() {
    let output = sutra_check(&[MALFORMED]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(text.contains(&format!("--> {MALFORMED}:10:15")), "{text}");
    assert!(text.ends_with(&format!("{MALFORMED}: 1 error\n")), "{text}");
}

#[test]
fn json_output_parses_and_locates_each_diagnostic() {
    let output = sutra_check(&["--json", MALFORMED, "examples/order.yaml"]);
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("stdout is one JSON document");
    let files = report["files"].as_array().expect("a list of files");
    assert_eq!(files.len(), 2);
    assert_eq!(files[0]["valid"], false);
    let diagnostic = &files[0]["diagnostics"][0];
    assert_eq!(diagnostic["file"], MALFORMED);
    assert_eq!(diagnostic["rule"], "dangling-reference");
    assert_eq!(
        (diagnostic["line"].as_u64(), diagnostic["column"].as_u64()),
        (Some(10), Some(15))
    );
    assert_eq!(diagnostic["hint"], "did you mean `credit`?");
    assert_eq!(files[1]["valid"], true);
}

#[test]
fn an_unreadable_file_exits_2_with_a_message() {
    let output = sutra_check(&["no/such/file.yaml"]);
    assert_eq!(output.status.code(), Some(2));
    let error = String::from_utf8_lossy(&output.stderr);
    assert!(error.contains("cannot read no/such/file.yaml"), "{error}");
}

#[test]
fn a_usage_error_exits_2() {
    assert_eq!(sutra_check(&[]).status.code(), Some(2));
    assert_eq!(sutra_check(&["--colour", "x.yaml"]).status.code(), Some(2));
}
