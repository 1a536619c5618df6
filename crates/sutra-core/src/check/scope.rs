//! `scope`: a block of nodes whose failures go to the scope's `on-error` and which its
//! `deadline` bounds (issue 34, `docs/design/time-and-undo.md` §3).
//!
//! The block's nodes were laid out by the first pass, as a list of their own (jumps may not
//! leave it: `cross-branch-jump`); here the shape is checked and the block's head found.

use crate::model::NodeKind;
use crate::yaml::Entry;

use super::nodes::Site;
use super::reader::Checker;

const EXAMPLE: &str = "scope: { nodes: [{ id: debit, task: {...} }] }";

pub(super) fn scope(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let record = site.spec(cx, kind, &["nodes"], EXAMPLE)?;
    let nodes = cx.required(
        &record,
        "nodes",
        "add `nodes: [...]`: the block that the scope's `on-error` and `deadline` cover",
    )?;
    // The first pass laid the list out when it is one; this reports it when it is not.
    cx.list(
        nodes,
        &record.label("nodes"),
        "nodes: [{ id: debit, task: {...} }]",
    )?;
    let list = site.outline.slot(site.index).scope?;
    Some(NodeKind::Scope(
        site.outline.lists[list].members.first().copied(),
    ))
}
