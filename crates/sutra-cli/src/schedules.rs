//! `sutra schedules list | pause | resume` (issue 34, decision 0056): the tenant's scheduled
//! flows, and an operator's pause, which holds fleet-wide until resumed.

use sutra_client::{Schedule, Schedules};

use crate::output::{Table, time};
use crate::remote::{CommandError, Context};

#[derive(clap::Subcommand)]
pub enum Command {
    /// List the scheduled flows: when each fires next, and what it fired last.
    List,
    /// Stop a schedule's ticks, on every replica, until it is resumed.
    Pause { deployment: String, flow: String },
    /// Let a paused schedule fire again; missed ticks fire as its `catch-up` says.
    Resume { deployment: String, flow: String },
}

pub async fn run(command: &Command, context: Context) -> Result<(), CommandError> {
    let (deployment, flow, paused) = match command {
        Command::List => {
            let listed = context.client.schedules().await?;
            context.print(&listed, listing);
            return Ok(());
        }
        Command::Pause { deployment, flow } => (deployment, flow, true),
        Command::Resume { deployment, flow } => (deployment, flow, false),
    };
    let schedule = context
        .client
        .pause_schedule(deployment, flow, paused)
        .await?;
    context.print(&schedule, one);
    Ok(())
}

fn listing(schedules: &Schedules) -> String {
    if schedules.items.is_empty() {
        return "no schedules: no active deployment version has a flow with \
                `start: { schedule: ... }`\n"
            .to_owned();
    }
    let mut table = Table::new(&[
        "DEPLOYMENT",
        "FLOW",
        "VERSION",
        "SCHEDULE",
        "TIMEZONE",
        "NEXT",
        "LAST",
        "LAST INSTANCE",
        "PAUSED",
    ]);
    for schedule in &schedules.items {
        table.row(vec![
            schedule.deployment.clone(),
            schedule.flow.clone(),
            schedule.version.to_string(),
            schedule.expression.clone(),
            schedule.timezone.clone(),
            shown(schedule.next_at.as_deref()),
            shown(schedule.last_at.as_deref()),
            schedule.last_instance.clone().unwrap_or_else(|| "-".into()),
            if schedule.paused { "yes" } else { "no" }.into(),
        ]);
    }
    table.render()
}

fn one(schedule: &Schedule) -> String {
    let state = if schedule.paused {
        "paused".to_owned()
    } else {
        format!("next fires {}", shown(schedule.next_at.as_deref()))
    };
    format!(
        "{}/{} ({} in {}): {state}\n",
        schedule.deployment, schedule.flow, schedule.expression, schedule.timezone
    )
}

fn shown(at: Option<&str>) -> String {
    at.map_or_else(|| "-".to_owned(), time)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schedule(paused: bool) -> Schedule {
        serde_json::from_value(json!({
            "deployment": "reports", "flow": "nightly", "version": 2,
            "expression": "cron 0 2 * * *", "timezone": "Europe/Berlin",
            "next_at": "2026-12-06T01:00:00Z", "last_at": null, "last_instance": null,
            "paused": paused,
        }))
        .unwrap()
    }

    #[test]
    fn a_schedule_lists_as_a_row_with_its_next_tick() {
        let listed = listing(&Schedules {
            items: vec![schedule(false)],
            next: None,
            extra: Default::default(),
        });
        assert!(listed.contains("cron 0 2 * * *"), "{listed}");
        assert!(listed.contains("Europe/Berlin"), "{listed}");
    }

    #[test]
    fn a_paused_schedule_says_so() {
        assert!(one(&schedule(true)).ends_with("paused\n"));
    }
}
