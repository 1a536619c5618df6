//! `sutra cancel ID`: ends a live instance as `cancelled`, resolving its waits, timers and
//! tasks.

use crate::output::status_change;
use crate::remote::{CommandError, Context, InstanceId};

pub async fn run(instance: &InstanceId, context: Context) -> Result<(), CommandError> {
    let change = context.client.cancel(&instance.id).await?;
    context.print(&change, status_change);
    Ok(())
}
