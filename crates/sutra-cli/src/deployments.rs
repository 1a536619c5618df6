//! `sutra deployments list` and `sutra deployments show NAME VERSION`: the stored versions, and
//! what keeps a draining one from retiring (SPEC §7.3).

use sutra_client::{Deployment, Page};

use crate::output::{Table, page, time};
use crate::remote::{CommandError, Context};

#[derive(clap::Subcommand)]
pub enum Command {
    /// List every version of the tenant's deployments.
    List,
    /// Show one version: its status, what keeps it from retiring if it drains, and its YAML.
    Show { name: String, version: u32 },
}

pub async fn run(command: &Command, context: Context) -> Result<(), CommandError> {
    match command {
        Command::List => {
            let listed = context.client.deployments().await?;
            context.print(&listed, listing);
        }
        Command::Show { name, version } => {
            let shown = context.client.deployment(name, *version).await?;
            context.print(&shown, one);
        }
    }
    Ok(())
}

fn listing(deployments: &Page<Deployment>) -> String {
    let header = ["NAME", "VERSION", "STATUS", "CREATED"];
    page(deployments, "deployment", &header, |deployment| {
        vec![
            deployment.name.clone(),
            deployment.version.to_string(),
            deployment.status.clone(),
            time(&deployment.created_at),
        ]
    })
}

fn one(deployment: &Deployment) -> String {
    let mut shown = format!(
        "{} version {}: {} (created {})\n",
        deployment.name,
        deployment.version,
        deployment.status,
        time(&deployment.created_at)
    );
    if let Some(retirement) = &deployment.retirement {
        shown.push_str("\nwhat keeps it from retiring:\n");
        let mut table = Table::new(&["UNENDED INSTANCES", "PENDING OUTBOX ROWS", "LIVE TASKS"]);
        table.row(vec![
            retirement.instances.to_string(),
            retirement.outbox.to_string(),
            retirement.tasks.to_string(),
        ]);
        shown.push_str(&table.render());
    }
    if let Some(source) = &deployment.source {
        shown.push('\n');
        shown.push_str(source);
        if !source.ends_with('\n') {
            shown.push('\n');
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_draining_version_shows_what_keeps_it() {
        let draining: Deployment = serde_json::from_value(json!({
            "name": "shop", "tenant": "default", "version": 1, "status": "draining",
            "created_at": "2026-12-01T08:00:00.123456Z", "source": "name: shop\n",
            "retirement": {"instances": 2, "outbox": 1, "tasks": 0},
        }))
        .unwrap();
        let shown = one(&draining);
        assert!(
            shown.starts_with("shop version 1: draining (created 2026-12-01T08:00:00Z)"),
            "{shown}"
        );
        assert!(shown.contains("UNENDED INSTANCES"), "{shown}");
        assert!(
            shown
                .lines()
                .any(|line| line.split_whitespace().eq(["2", "1", "0"])),
            "{shown}"
        );
        assert!(shown.ends_with("name: shop\n"), "{shown}");
    }
}
