//! The timers of a node that waits (`task`, `receive`, `for-each`, `call`): a `deadline`, which
//! ends the wait and jumps, and a `remind`, whose own list of nodes runs beside the wait each time
//! it fires.
//!
//! The reminder's nodes were laid out by the first pass, as a list of their own; here only its
//! timing is read, and its head found.

use crate::diagnostic::Diagnostic;
use crate::model::{Deadline, Remind};
use crate::yaml::Entry;

use super::nodes::Site;
use super::reader::{Checker, Record, Zero};

/// The `deadline` of `node`, whose kind is `kind`, one that waits.
pub(super) fn deadline(
    cx: &mut Checker,
    site: &Site,
    node: &Record,
    kind: &Entry,
) -> Option<Deadline> {
    let entry = node.entry("deadline")?;
    if kind.key == "receive"
        && let Some(timeout) = kind.value.entry("timeout")
    {
        cx.report(
            Diagnostic::error(
                "conflicting-fields",
                entry.key_span,
                format!(
                    "{} has both a `deadline` and a `timeout` (line {})",
                    site.what, timeout.key_span.line
                ),
            )
            .with_hint("keep one: a `deadline` is the general form of `timeout` + `on-timeout`"),
        );
    }
    let what = format!("the `deadline` of {}", site.what);
    let example = "deadline: { after: P2D, next: escalate }";
    let record = cx.record(&entry.value, what, entry.key_span, example)?;
    cx.unknown_fields(&record, &["after", "next"]);
    let after = cx
        .required(
            &record,
            "after",
            "add `after:` with how long the node may wait, such as P2D",
        )
        .and_then(|value| cx.duration(value, &record.label("after"), Zero::Refused));
    let next = cx
        .required(
            &record,
            "next",
            "add `next:` with the id of the node to go to when the deadline passes",
        )
        .and_then(|target| site.jump(cx, target, &record.label("next")));
    Some(Deadline {
        after: after?,
        next: next?,
    })
}

/// The `remind` of `node`, a node that waits.
pub(super) fn remind(cx: &mut Checker, site: &Site, node: &Record) -> Option<Remind> {
    let entry = node.entry("remind")?;
    let what = format!("the `remind` of {}", site.what);
    let example = "remind: { after: PT4H, every: PT4H, nodes: [...] }";
    let record = cx.record(&entry.value, what, entry.key_span, example)?;
    cx.unknown_fields(&record, &["after", "every", "nodes"]);
    let after = cx
        .required(
            &record,
            "after",
            "add `after:` with how long after the node starts waiting to remind, such as PT4H",
        )
        .and_then(|value| cx.duration(value, &record.label("after"), Zero::Refused));
    let hint = "write `PT1S` or longer: each reminder is a step and a row of history";
    let every = record
        .get("every")
        .and_then(|value| cx.period(value, &record.label("every"), hint));
    if let Some(nodes) = record.get("nodes") {
        // The first pass laid the list out when it is one; this reports it when it is not.
        cx.list(
            nodes,
            &record.label("nodes"),
            "nodes: [{ id: nudge, emit: {...} }]",
        );
    }
    let outline = site.outline;
    let head = outline
        .slot(site.index)
        .reminder
        .and_then(|list| outline.lists[list].members.first().copied());
    let every_ok = record.get("every").is_none() || every.is_some();
    Some(Remind {
        after: after?,
        every: every_ok.then_some(every)?,
        head,
    })
}
