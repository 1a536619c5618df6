//! `sutra instances bulk ACTION [filters]`: restores, cancels or migrates every instance a filter
//! selects, one server page after another, with a progress bar; `--dry-run` counts what would be
//! touched. Each instance is acted on alone, so a refusal (its claim held, its state moved on)
//! leaves the others done, and running the same command again touches only what is left.

use std::collections::BTreeMap;

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use sutra_client::{BulkBody, BulkFilter, BulkResult};

use crate::output::Table;
use crate::remote::{CommandError, Context};

/// The refusals a human report lists one by one; `--json` has them all.
const REFUSALS_SHOWN: usize = 20;

#[derive(clap::Args)]
pub struct Args {
    /// restore, cancel or migrate.
    action: String,
    /// Only instances in this status (suspended, completed, cancelled or failed).
    #[arg(long)]
    status: Option<String>,
    #[arg(long)]
    flow: Option<String>,
    /// Only instances on this version of their deployment.
    #[arg(long, value_name = "N")]
    version: Option<u32>,
    /// Only failed instances stopped at this failure code.
    #[arg(long, value_name = "CODE")]
    failure_code: Option<String>,
    /// Only instances created before this RFC 3339 instant.
    #[arg(long, value_name = "INSTANT")]
    created_before: Option<String>,
    /// Only instances created at or after this RFC 3339 instant.
    #[arg(long, value_name = "INSTANT")]
    created_after: Option<String>,
    /// migrate: the version to move onto.
    #[arg(long, value_name = "N")]
    to_version: Option<u32>,
    /// migrate: where a token at node OLD goes (repeat for each node that moved).
    #[arg(long, value_name = "OLD=NEW", value_parser = crate::migrate::node_pair)]
    map: Vec<(String, String)>,
    /// Instances per server call (at most 500).
    #[arg(long, value_name = "N", default_value_t = 500)]
    page: u32,
    /// Count what would be touched, and touch nothing.
    #[arg(long)]
    dry_run: bool,
    /// cancel: with no filter, cancel every instance of the tenant (refused without it).
    #[arg(long)]
    all: bool,
}

/// Everything every page answered.
#[derive(Serialize)]
struct Report {
    action: String,
    dry_run: bool,
    counts: BTreeMap<String, usize>,
    results: Vec<BulkResult>,
}

pub async fn run(args: &Args, context: Context) -> Result<(), CommandError> {
    let mut body = BulkBody {
        filter: BulkFilter {
            status: args.status.clone(),
            flow: args.flow.clone(),
            version: args.version,
            failure_code: args.failure_code.clone(),
            created_before: args.created_before.clone(),
            created_after: args.created_after.clone(),
        },
        action: args.action.clone(),
        to_version: args.to_version,
        map: args.map.iter().cloned().collect(),
        limit: Some(args.page),
        after: None,
        dry_run: args.dry_run,
        all: args.all,
    };
    let progress = progress_bar(&context, &args.action);
    let mut report = Report {
        action: args.action.clone(),
        dry_run: args.dry_run,
        counts: BTreeMap::new(),
        results: Vec::new(),
    };
    loop {
        let page = context.client.bulk(&body).await;
        let page = match page {
            Ok(page) => page,
            Err(error) => {
                progress.finish_and_clear();
                return Err(error.into());
            }
        };
        for result in &page.results {
            *report.counts.entry(result.outcome.clone()).or_default() += 1;
        }
        progress.inc(page.results.len() as u64);
        progress.set_message(summary(&report.counts));
        report.results.extend(page.results);
        match page.next {
            Some(next) => body.after = Some(next),
            None => break,
        }
    }
    progress.finish_and_clear();
    context.print(&report, human);
    Ok(())
}

fn progress_bar(context: &Context, action: &str) -> ProgressBar {
    if context.json {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {pos} instances: {msg}") {
        bar.set_style(style);
    }
    bar.set_prefix(format!("bulk {action}"));
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

fn summary(counts: &BTreeMap<String, usize>) -> String {
    let parts: Vec<String> = counts
        .iter()
        .map(|(outcome, n)| format!("{n} {outcome}"))
        .collect();
    parts.join(", ")
}

fn human(report: &Report) -> String {
    if report.results.is_empty() {
        return "no instance matches the filter\n".to_owned();
    }
    let verb = if report.dry_run { "would " } else { "" };
    let mut shown = format!(
        "{} instances {verb}{}: {}\n",
        report.results.len(),
        report.action,
        summary(&report.counts)
    );
    let refused: Vec<&BulkResult> = report
        .results
        .iter()
        .filter(|result| result.outcome == "refused")
        .collect();
    if !refused.is_empty() {
        let mut table = Table::new(&["REFUSED", "CODE", "DETAIL"]);
        for result in refused.iter().take(REFUSALS_SHOWN) {
            table.row(vec![
                result.instance.clone(),
                result.code.clone().unwrap_or_default(),
                result.detail.clone().unwrap_or_default(),
            ]);
        }
        shown.push_str(&table.render());
        if refused.len() > REFUSALS_SHOWN {
            let more = refused.len() - REFUSALS_SHOWN;
            shown.push_str(&format!("and {more} more (--json lists them all)\n"));
        }
        shown.push_str("run the same command again to retry what was refused\n");
    }
    shown
}
