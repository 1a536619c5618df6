//! `sutra send CHANNEL --id ID --data JSON`: sends one CloudEvent on an `http` channel, as a
//! producer would, and shows how the server answered (SPEC §5.3).

use serde_json::Value;
use sutra_client::{Accepted, CloudEvent, Sent};

use crate::output::{instance_status, pretty};
use crate::remote::{CommandError, Context};

#[derive(clap::Args)]
pub struct Args {
    /// The channel to send on.
    channel: String,
    /// The event id: the server's deduplication key, so sending it again changes nothing.
    #[arg(long)]
    id: String,
    /// The event's data, as JSON.
    #[arg(long, value_name = "JSON")]
    data: String,
    /// The CloudEvents `type`.
    #[arg(long = "type", value_name = "TYPE", default_value = "sutra.cli.send")]
    kind: String,
    /// The CloudEvents `source`.
    #[arg(long, default_value = "sutra-cli")]
    source: String,
}

pub async fn run(args: &Args, context: Context) -> Result<(), CommandError> {
    let data: Value = serde_json::from_str(&args.data)
        .map_err(|error| CommandError::Usage(format!("--data is not JSON: {error}")))?;
    let event = CloudEvent::new(&args.id, &args.kind, &args.source, data);
    let sent = context.client.send(&args.channel, &event).await?;
    context.print(&sent, human);
    Ok(())
}

fn human(sent: &Sent) -> String {
    match sent {
        Sent::Accepted(accepted) if accepted.dedup => format!(
            "{}(a duplicate: this event id was sent before, so nothing changed)\n",
            accepted_text(accepted),
        ),
        Sent::Accepted(accepted) => accepted_text(accepted),
        Sent::Replied { instance, reply } => format!(
            "{}reply:\n{}\n",
            instance_status(instance.as_deref().unwrap_or("?"), "completed"),
            pretty(reply)
        ),
    }
}

/// A buffered message has no instance yet: it waits for a receive to park on its key.
fn accepted_text(accepted: &Accepted) -> String {
    match &accepted.instance {
        Some(instance) => instance_status(instance, &accepted.status),
        None => format!(
            "message {}: no instance waits for it yet\n",
            accepted.status
        ),
    }
}
