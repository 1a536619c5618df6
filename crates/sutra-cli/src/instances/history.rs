//! `sutra instances history ID`: the instance's audit events, one line each.

use sutra_client::HistoryEvent;

use crate::output::{Table, one_line, time};
use crate::remote::{CommandError, Context, InstanceId};

/// Details are cut to keep one event on one line; `--json` has them whole.
const DETAIL_CHARS_MAX: usize = 80;

pub async fn run(instance: &InstanceId, context: Context) -> Result<(), CommandError> {
    let events = context.client.history(&instance.id).await?;
    context.print(&events, |events| human(events));
    Ok(())
}

fn human(events: &[HistoryEvent]) -> String {
    let mut table = Table::new(&["SEQ", "AT", "KIND", "NODE", "DETAIL"]);
    for event in events {
        table.row(vec![
            event.seq.to_string(),
            time(&event.at),
            event.kind.clone(),
            event.node.clone().unwrap_or_default(),
            one_line(&event.detail, DETAIL_CHARS_MAX),
        ]);
    }
    table.render()
}
