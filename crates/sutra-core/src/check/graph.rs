//! Reachability: nodes that no path from the flow's entry leads to are warned about.
//!
//! Only the first node of each unreachable region is reported (with a count of the rest), so
//! that dead code after an `end` reads as one warning, not one per node.

use crate::diagnostic::{Diagnostic, Span};
use crate::model::{After, Node, NodeIndex, NodeKind};

use super::compensation;
use super::reader::Checker;

/// Where control can go from `node`.
fn successors(node: &Node) -> Vec<NodeIndex> {
    let after = match node.after {
        After::Node(next) => Some(next),
        After::End => None,
    };
    let boundary = node
        .deadline
        .as_ref()
        .map(|deadline| deadline.next)
        .into_iter()
        .chain(node.remind.as_ref().and_then(|remind| remind.head));
    let mut successors = match &node.kind {
        NodeKind::End { .. } | NodeKind::Fail { .. } => vec![],
        NodeKind::Choice(choice) => choice
            .arms
            .iter()
            .map(|arm| arm.next)
            .chain(choice.otherwise)
            .collect(),
        NodeKind::Parallel(heads) => heads.iter().flatten().copied().chain(after).collect(),
        NodeKind::Scope(head) => head
            .iter()
            .copied()
            .chain(after)
            .chain(node.on_error)
            .collect(),
        NodeKind::Task(_) | NodeKind::ForEach(_) | NodeKind::Call(_) => {
            after.into_iter().chain(node.on_error).collect()
        }
        NodeKind::Receive(receive) => after.into_iter().chain(receive.on_timeout).collect(),
        NodeKind::Race(arms) => arms
            .iter()
            .filter_map(|arm| match arm.after {
                After::Node(next) => Some(next),
                After::End => None,
            })
            .collect(),
        NodeKind::Set(_) | NodeKind::Emit(_) | NodeKind::Wait(_) | NodeKind::Compensate { .. } => {
            after.into_iter().collect()
        }
    };
    successors.extend(boundary);
    successors
}

/// Marks every node reachable from `from` in `seen`; returns how many were newly marked.
fn mark_from(nodes: &[Node], from: NodeIndex, seen: &mut [bool]) -> usize {
    let mut marked = 0;
    let mut stack = vec![from];
    while let Some(index) = stack.pop() {
        let slot = &mut seen[index.0 as usize];
        if *slot {
            continue;
        }
        *slot = true;
        marked += 1;
        stack.extend(successors(&nodes[index.0 as usize]));
    }
    marked
}

/// Warns about every unreachable region; `spans[i]` is where node `i` is reported.
pub(super) fn warn_unreachable(
    cx: &mut Checker,
    nodes: &[Node],
    entry: Option<NodeIndex>,
    spans: &[Span],
) {
    let mut seen = vec![false; nodes.len()];
    if let Some(entry) = entry {
        mark_from(nodes, entry, &mut seen);
    }
    // A handler is reached by compensation alone: never by the flow's path, and not warned
    // about for it.
    for handler in compensation::handlers(nodes) {
        let at = handler.0 as usize;
        if seen[at] {
            cx.report(
                Diagnostic::error(
                    "reachable-handler",
                    spans[at],
                    format!(
                        "node `{}` is a compensation handler, and the flow's own path reaches it",
                        nodes[at].id
                    ),
                )
                .with_hint(
                    "compensation alone runs a handler: put it where nothing leads to it — \
                     after an `end` or a `fail` — and no `next` or arm jumps to it",
                ),
            );
        }
        // Alone: a handler never goes on to what follows it in its list.
        seen[at] = true;
    }
    for index in 0..nodes.len() {
        if seen[index] {
            continue;
        }
        let region = mark_from(nodes, NodeIndex(index as u32), &mut seen);
        let id = &nodes[index].id;
        let message = match region - 1 {
            0 => format!("node `{id}` is never reached"),
            1 => format!("node `{id}` is never reached, nor is the node it leads to"),
            more => format!("node `{id}` is never reached, nor are the {more} nodes it leads to"),
        };
        cx.report(
            Diagnostic::warning("unreachable-node", spans[index], message).with_hint(
                "no `next`, choice or race arm, `on-error`, `on-timeout` or `deadline` leads \
                 here, and the node before does not continue here; jump to it, or remove it",
            ),
        );
    }
}
