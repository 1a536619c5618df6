//! `sutra instances list | show ID | history ID | bulk ACTION`: what the server holds about
//! instances, and repairs of many at once.

mod bulk;
mod history;
mod list;
pub(crate) mod show;

use crate::remote::{CommandError, Context, InstanceId};

#[derive(clap::Subcommand)]
pub enum Command {
    /// List instances, newest last.
    List(list::Args),
    /// Show one instance: status, failure, variables and where its tokens wait.
    Show(InstanceId),
    /// Show an instance's audit events in order.
    History(InstanceId),
    /// Restore, cancel or migrate every instance a filter selects, a page at a time.
    Bulk(bulk::Args),
}

pub async fn run(command: &Command, context: Context) -> Result<(), CommandError> {
    match command {
        Command::List(args) => list::run(args, context).await,
        Command::Show(instance) => show::run(instance, context).await,
        Command::History(instance) => history::run(instance, context).await,
        Command::Bulk(args) => bulk::run(args, context).await,
    }
}
