//! `sutra restore ID`: brings a `failed` instance back to `suspended`; the node that failed runs
//! again (a task with a fresh retry budget). The usual repair is to deploy a fix, migrate the
//! instance onto it, then restore (SPEC §7.2).

use crate::output::status_change;
use crate::remote::{CommandError, Context, InstanceId};

pub async fn run(instance: &InstanceId, context: Context) -> Result<(), CommandError> {
    let change = context.client.restore(&instance.id).await?;
    context.print(&change, status_change);
    Ok(())
}
