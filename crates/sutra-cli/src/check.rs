//! `sutra check FILE...`: validates deployment documents without a server, printing located
//! diagnostics and a one-line summary per file (or, with `--json`, one JSON document for tools).

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};
use sutra_core::check::{Checked, check};
use sutra_core::diagnostic::render_all;

use crate::output::{counted, write_stdout};

#[derive(clap::Args)]
pub struct Args {
    /// Deployment documents (YAML) to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

/// The outcome for one file.
enum Report {
    Checked {
        file: String,
        source: String,
        checked: Checked,
    },
    Unreadable {
        file: String,
        error: String,
    },
}

/// `json` is the global `--json`: one document for editors and other tools.
pub fn run(args: &Args, json: bool) -> ExitCode {
    let reports: Vec<Report> = args.files.iter().map(read_and_check).collect();
    let output = if json {
        let files: Vec<Value> = reports.iter().map(to_json).collect();
        format!("{:#}\n", json!({ "files": files }))
    } else {
        reports.iter().map(human).collect()
    };
    for report in &reports {
        if let Report::Unreadable { error, .. } = report {
            eprintln!("sutra: {error}");
        }
    }
    write_stdout(&output);
    exit_code(&reports)
}

fn read_and_check(path: &PathBuf) -> Report {
    let file = path.display().to_string();
    match std::fs::read_to_string(path) {
        Ok(source) => Report::Checked {
            checked: check(&source),
            file,
            source,
        },
        Err(error) => Report::Unreadable {
            error: format!("cannot read {file}: {error}"),
            file,
        },
    }
}

/// An unreadable file is a usage problem (2) and outranks an invalid document (1).
fn exit_code(reports: &[Report]) -> ExitCode {
    let unreadable = reports
        .iter()
        .any(|report| matches!(report, Report::Unreadable { .. }));
    let invalid = reports
        .iter()
        .any(|report| matches!(report, Report::Checked { checked, .. } if checked.errors() > 0));
    match (unreadable, invalid) {
        (true, _) => ExitCode::from(2),
        (false, true) => ExitCode::from(1),
        (false, false) => ExitCode::SUCCESS,
    }
}

/// The rendered diagnostics and the summary line of one file.
fn human(report: &Report) -> String {
    let Report::Checked {
        file,
        source,
        checked,
    } = report
    else {
        return String::new();
    };
    let summary = format!("{}\n", summary(file, checked));
    if checked.diagnostics.is_empty() {
        summary
    } else {
        format!(
            "{}\n{summary}",
            render_all(&checked.diagnostics, file, source)
        )
    }
}

/// "payments.yaml: ok (2 flows, 3 channels)", "payments.yaml: 2 errors, 1 warning".
fn summary(file: &str, checked: &Checked) -> String {
    let warnings = match checked.warnings() {
        0 => String::new(),
        n => format!(", {}", counted(n, "warning")),
    };
    match &checked.deployment {
        Some(deployment) => format!(
            "{file}: ok ({}, {}){warnings}",
            counted(deployment.flows.len(), "flow"),
            counted(deployment.channels.len(), "channel"),
        ),
        None => format!("{file}: {}{warnings}", counted(checked.errors(), "error")),
    }
}

fn to_json(report: &Report) -> Value {
    match report {
        Report::Unreadable { file, error } => json!({ "file": file, "error": error }),
        Report::Checked { file, checked, .. } => json!({
            "file": file,
            "valid": checked.deployment.is_some(),
            "errors": checked.errors(),
            "warnings": checked.warnings(),
            "diagnostics": checked
                .diagnostics
                .iter()
                .map(|diagnostic| diagnostic.to_json(file))
                .collect::<Vec<_>>(),
        }),
    }
}
