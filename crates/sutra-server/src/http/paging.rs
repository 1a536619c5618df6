//! What the listings share: a page's size, the cursor a page gives and the next request hands
//! back, and the filters by status and by instant that the instance listing and a bulk
//! selection both take.

use sutra_core::codes;
use sutra_core::snapshot::Status;

use super::extract::{Result, invalid};
use crate::problem::Problem;

/// The most items one page of a listing holds.
const PAGE_MAX: u32 = 500;

/// A keyset page's size: 100 unless asked, at most [`PAGE_MAX`].
pub(super) fn page_limit(limit: Option<u32>) -> u32 {
    limit.unwrap_or(100).clamp(1, PAGE_MAX)
}

/// The cursor of the page after `items`: the last item's id when the page is full, `None` when
/// it is the last page.
pub(super) fn next_cursor<T>(
    items: &[T],
    limit: u32,
    id: impl Fn(&T) -> &String,
) -> Option<String> {
    let full = items.len() as u32 == limit;
    items.last().filter(|_| full).map(|item| id(item).clone())
}

/// A listing's `after`, if it is one of the cursors this server gives (`ours`): anything else
/// would silently page from nowhere.
pub(super) fn cursor(after: Option<String>, ours: fn(&str) -> bool) -> Result<Option<String>> {
    match after {
        Some(after) if !ours(&after) => Err(invalid(format!(
            "`after`: `{}` is not a cursor this server gave; pass the `next` of the previous page",
            after.chars().take(64).collect::<String>()
        ))),
        after => Ok(after),
    }
}

/// A listing's `parent`: an instance id, or no instance could match.
pub(super) fn parent(parent: Option<String>) -> Result<Option<String>> {
    match parent {
        Some(parent) if !is_instance_id(&parent) => Err(invalid(format!(
            "`parent`: `{}` is not an instance id; pass the `id` of the calling instance",
            parent.chars().take(64).collect::<String>()
        ))),
        parent => Ok(parent),
    }
}

/// An instance id, as the cursors of the instance listing are.
pub(super) fn is_instance_id(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok()
}

/// An RFC 3339 instant of a filter, named by `field` when it is not one.
pub(super) fn instant(field: &str, text: Option<String>) -> Result<Option<jiff::Timestamp>> {
    text.map(|text| {
        text.parse::<jiff::Timestamp>()
            .map_err(|e| invalid(format!("`{field}`: {e}; use an RFC 3339 instant")))
    })
    .transpose()
}

/// A status a listing filters by: any but `created`, which no stored instance rests in.
pub(super) fn parse_status(text: &str) -> Result<Status> {
    Status::parse(text)
        .filter(|status| *status != Status::Created)
        .ok_or_else(|| {
            Problem::new(
                codes::API_REQUEST_INVALID,
                format!("unknown status `{text}`; use suspended, completed, cancelled or failed"),
            )
        })
}
