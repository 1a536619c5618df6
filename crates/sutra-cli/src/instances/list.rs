//! `sutra instances list`: one line per instance, filtered and paged by the server.

use sutra_client::{InstanceQuery, InstanceSummary, Page};

use crate::output::{page, time};
use crate::remote::{CommandError, Context};

#[derive(clap::Args)]
pub struct Args {
    /// Only instances with this status: suspended, completed, cancelled or failed.
    #[arg(long)]
    status: Option<String>,
    /// Only instances of this flow.
    #[arg(long)]
    flow: Option<String>,
    /// Only the instances this instance called (its children).
    #[arg(long, value_name = "ID")]
    parent: Option<String>,
    /// At most this many (the server's default is 100).
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Continue after this cursor (printed under a full page).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

pub async fn run(args: &Args, context: Context) -> Result<(), CommandError> {
    let query = InstanceQuery {
        status: args.status.clone(),
        flow: args.flow.clone(),
        parent: args.parent.clone(),
        limit: args.limit,
        after: args.after.clone(),
        ..InstanceQuery::default()
    };
    let instances = context.client.instances(&query).await?;
    context.print(&instances, human);
    Ok(())
}

fn human(instances: &Page<InstanceSummary>) -> String {
    let header = ["ID", "FLOW", "VERSION", "STATUS", "UPDATED"];
    page(instances, "instance", &header, |instance| {
        vec![
            instance.id.clone(),
            instance.flow.clone(),
            instance.version.to_string(),
            instance.status.clone(),
            time(&instance.updated_at),
        ]
    })
}
