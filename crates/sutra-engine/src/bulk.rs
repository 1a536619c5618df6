//! Bulk repair: one administrative action — restore, cancel or migrate — on every instance a
//! filter selects, a bounded page per call (what a Camunda 7 operator's batch operation and a
//! Temporal user's batch reset do by query).
//!
//! Each instance is acted on alone, through the same administrative step as a single call, so
//! one instance's refusal (its claim held, its state moved on) leaves the others done. A call
//! is idempotent by construction: the filter selects by state, and an instance already acted on
//! no longer matches it (a restored instance is not `failed`, a migrated one not on its old
//! version), so the same call again touches nothing. Pages follow the listing's keyset: `next`
//! is the last id looked at when the page was full.

use std::collections::BTreeMap;

use jiff::Timestamp;
use sutra_core::snapshot::Status;
use sutra_store::InstanceFilter;

use crate::admin::Admin;
use crate::error::Error;
use crate::request::StepOutcome;
use crate::shared::Shared;

/// Which instances a bulk call acts on; every field narrows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selection {
    pub status: Option<Status>,
    pub flow: Option<String>,
    pub version: Option<u32>,
    /// The code of the failure a failed instance is stopped at.
    pub failure_code: Option<String>,
    pub created_before: Option<Timestamp>,
    pub created_after: Option<Timestamp>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Restore,
    Cancel,
    Migrate {
        to_version: u32,
        map: BTreeMap<String, String>,
    },
}

/// One page of a bulk call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub selection: Selection,
    pub action: Action,
    /// At most this many instances looked at.
    pub limit: u32,
    /// The `next` of the previous page.
    pub after: Option<String>,
    /// Select only: act on nothing.
    pub dry_run: bool,
}

/// What became of each selected instance; `None` on a dry run.
pub struct Page {
    pub results: Vec<(String, Option<Result<StepOutcome, Error>>)>,
    pub next: Option<String>,
}

pub(crate) async fn run(
    shared: &Shared,
    admin: &Admin,
    tenant: &str,
    request: &Request,
) -> Result<Page, Error> {
    let selection = &request.selection;
    let filter = InstanceFilter {
        status: selection.status,
        flow: selection.flow.clone(),
        version: selection.version,
        // A bulk selection does not filter by parent (yet).
        parent: None,
        created_before: selection.created_before,
        created_after: selection.created_after,
        after: request.after.clone(),
        limit: request.limit,
    };
    // What a selection needs of each instance is on its summary: no snapshot is read.
    let records = shared
        .store
        .instance_summaries(tenant, &filter, false)
        .await?;
    let full = u32::try_from(records.len()).is_ok_and(|n| n == request.limit);
    let next = records
        .last()
        .filter(|_| full)
        .map(|record| record.id.clone());
    let mut results = Vec::new();
    for record in records {
        let failure = record.failure.as_ref().map(|f| f.code.as_str());
        if selection
            .failure_code
            .as_deref()
            .is_some_and(|code| failure != Some(code))
        {
            continue;
        }
        let id = record.id;
        let acted = match (&request.action, request.dry_run) {
            (_, true) => None,
            (Action::Restore, false) => Some(admin.restore(tenant, &id).await),
            (Action::Cancel, false) => Some(admin.cancel(tenant, &id).await),
            (Action::Migrate { to_version, map }, false) => {
                Some(admin.migrate(tenant, &id, *to_version, map.clone()).await)
            }
        };
        results.push((id, acted));
    }
    Ok(Page { results, next })
}
