//! `sutra deploy FILE`: sends a deployment document to a running server, which checks it as
//! `sutra check` does and stores it as the next version of its name.

use std::path::PathBuf;

use sutra_client::{Deployment, Diagnostic};

use crate::remote::{CommandError, Context};

#[derive(clap::Args)]
pub struct Args {
    /// The deployment document (YAML).
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

pub async fn run(args: &Args, context: Context) -> Result<(), CommandError> {
    let file = args.file.display().to_string();
    let yaml = std::fs::read_to_string(&args.file)
        .map_err(|error| CommandError::Usage(format!("cannot read {file}: {error}")))?;
    let deployment = context.client.deploy_file(&yaml, Some(&file)).await?;
    context.print(&deployment, |deployment| human(deployment, &file));
    Ok(())
}

/// "deployed shop version 2 (active)", then any warnings located in the local file.
fn human(deployment: &Deployment, file: &str) -> String {
    let mut text = format!(
        "deployed {} version {} ({})\n",
        deployment.name, deployment.version, deployment.status
    );
    for warning in deployment.warnings.iter().flatten() {
        text.push_str(&warning_text(warning, file));
    }
    text
}

fn warning_text(warning: &Diagnostic, file: &str) -> String {
    let hint = match &warning.hint {
        Some(hint) => format!("  = hint: {hint}\n"),
        None => String::new(),
    };
    format!(
        "{}[{}]: {}\n  --> {file}:{}:{}\n{hint}",
        warning.severity, warning.rule, warning.message, warning.line, warning.column
    )
}
