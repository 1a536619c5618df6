//! Golden tests for the checker's human output, a product surface: every document under
//! `tests/malformed/` is checked and rendered, and the text must equal its `.expected` sibling.
//! Run with `UPDATE_GOLDEN=1` to rewrite the `.expected` files, then read the diff.

use std::path::{Path, PathBuf};

use sutra_core::check::{Checked, check};
use sutra_core::diagnostic::render_all;

/// The cases that are valid documents with warnings only.
const WARNING_ONLY: &[&str] = &["33-unreachable-node.yaml", "72-call-cycle.yaml"];

fn cases() -> Vec<PathBuf> {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/malformed");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("tests/malformed exists")
        .map(|entry| entry.expect("readable directory").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .collect();
    cases.sort();
    cases
}

fn name(case: &Path) -> String {
    case.file_name()
        .expect("a file")
        .to_string_lossy()
        .into_owned()
}

fn checked(case: &Path) -> (String, Checked) {
    let source = std::fs::read_to_string(case).expect("readable case");
    let checked = check(&source);
    (source, checked)
}

#[test]
fn malformed_documents_render_exactly_as_expected() {
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut mismatched = Vec::new();
    for case in cases() {
        let (source, checked) = checked(&case);
        let actual = render_all(&checked.diagnostics, &name(&case), &source);
        let expected_path = case.with_extension("expected");
        if update {
            std::fs::write(&expected_path, &actual).expect("writable .expected");
            continue;
        }
        let expected = std::fs::read_to_string(&expected_path).unwrap_or_default();
        if actual != expected {
            mismatched.push(format!(
                "--- {}\n{expected}\n+++ actual\n{actual}",
                name(&case)
            ));
        }
    }
    assert!(
        mismatched.is_empty(),
        "{} golden file(s) differ (UPDATE_GOLDEN=1 rewrites them):\n{}",
        mismatched.len(),
        mismatched.join("\n")
    );
}

#[test]
fn every_malformed_document_is_refused_and_the_warning_only_one_is_accepted() {
    let cases = cases();
    assert!(cases.len() >= 28, "only {} golden cases", cases.len());
    for case in cases {
        let (_, checked) = checked(&case);
        let name = name(&case);
        if WARNING_ONLY.contains(&name.as_str()) {
            assert_eq!(checked.errors(), 0, "{name}");
            assert!(checked.warnings() > 0, "{name}");
            assert!(checked.deployment.is_some(), "{name}");
        } else {
            assert!(checked.errors() > 0, "{name} has no error");
            assert!(checked.deployment.is_none(), "{name}");
        }
    }
}
