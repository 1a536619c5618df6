//! `sutra tasks list`: the external tasks waiting for workers, held by them, or done (SPEC §5.5).

use sutra_client::{Page, TaskQuery, TaskSummary};

use crate::output::page;
use crate::remote::{CommandError, Context};

#[derive(clap::Subcommand)]
pub enum Command {
    /// List tasks.
    List(ListArgs),
}

#[derive(clap::Args)]
pub struct ListArgs {
    /// Only tasks of this topic.
    #[arg(long)]
    topic: Option<String>,
    /// Only tasks in this state: available, locked, completed, failed, terminal or cancelled.
    #[arg(long)]
    state: Option<String>,
    /// At most this many.
    #[arg(long, value_name = "N")]
    limit: Option<u32>,
    /// Continue after this cursor (printed under a full page).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
}

pub async fn run(command: &Command, context: Context) -> Result<(), CommandError> {
    let Command::List(args) = command;
    let query = TaskQuery {
        topic: args.topic.clone(),
        state: args.state.clone(),
        limit: args.limit,
        after: args.after.clone(),
    };
    let tasks = context.client.tasks(&query).await?;
    context.print(&tasks, human);
    Ok(())
}

fn human(tasks: &Page<TaskSummary>) -> String {
    let header = ["ID", "TOPIC", "STATE", "ATTEMPT", "WORKER"];
    page(tasks, "task", &header, |task| {
        vec![
            task.id.clone(),
            task.topic.clone(),
            task.state.clone(),
            task.attempt.to_string(),
            task.worker.clone().unwrap_or_else(|| "-".to_owned()),
        ]
    })
}
