//! Compensation (issue 34, `docs/design/time-and-undo.md` §4): `compensate-with` names the
//! handler that undoes a node once it completed, and `compensate` runs the handlers.
//!
//! A handler is an ordinary node of the flow that only compensation reaches: the checker
//! refuses one that the flow's own path also reaches (`graph.rs`), one of a kind that cannot
//! undo anything, and one that would leave compensation by a jump of its own.

use crate::diagnostic::{Diagnostic, Span};
use crate::model::{Node, NodeIndex, NodeKind};
use crate::yaml::{self, Entry};

use super::nodes::Site;
use super::reader::{Checker, suggestion};

const EXAMPLE: &str = "compensate: { scope: payment }";

/// A `compensate` node: `{}`, or the `scope` whose completions it undoes.
pub(super) fn compensate(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    if kind.value.value == yaml::Value::Null {
        return Some(NodeKind::Compensate { scope: None });
    }
    let record = site.spec(cx, kind, &["scope"], EXAMPLE)?;
    let Some(target) = record.get("scope") else {
        return Some(NodeKind::Compensate { scope: None });
    };
    let id = cx.text(target, &record.label("scope"))?;
    let scopes: Vec<&str> = (site.outline.slots.iter())
        .filter(|slot| slot.node.entry("scope").is_some())
        .filter_map(|slot| slot.id)
        .collect();
    if !scopes.contains(&id) {
        let hint = if scopes.is_empty() {
            "this flow has no `scope` node: remove `scope:` to undo every completion".to_owned()
        } else {
            suggestion(id, &scopes, "the flow's scopes are")
        };
        cx.report(
            Diagnostic::error(
                "unknown-scope",
                target.span,
                format!(
                    "{} names scope `{id}`, which is not a `scope` node of flow `{}`",
                    record.label("scope"),
                    site.outline.flow
                ),
            )
            .with_hint(hint),
        );
        return None;
    }
    Some(NodeKind::Compensate {
        scope: Some(id.to_owned()),
    })
}

/// Refuses handlers that cannot serve as one: of a kind that undoes nothing, or with a jump of
/// their own out of compensation. `spans[i]` is where node `i` is reported.
pub(super) fn check_handlers(cx: &mut Checker, nodes: &[Node], spans: &[Span]) {
    let mut checked = Vec::new();
    for node in nodes {
        let Some(handler) = node.compensate_with else {
            continue;
        };
        if checked.contains(&handler) {
            continue;
        }
        checked.push(handler);
        if let Some(why) = unfit(&nodes[handler.0 as usize]) {
            let id = &nodes[handler.0 as usize].id;
            cx.report(
                Diagnostic::error(
                    "invalid-handler",
                    spans[handler.0 as usize],
                    format!(
                        "node `{id}`, the compensation handler of `{}`, {why}",
                        node.id
                    ),
                )
                .with_hint(
                    "a handler is one `task`, `call`, `emit` or `set` node with no `on-error`, \
                     `deadline`, `remind` or `compensate-with` of its own: compensation runs it \
                     and goes on to the next handler",
                ),
            );
        }
    }
}

/// Why `handler` cannot be a handler, if it cannot.
fn unfit(handler: &Node) -> Option<String> {
    if !matches!(
        handler.kind,
        NodeKind::Task(_) | NodeKind::Call(_) | NodeKind::Emit(_) | NodeKind::Set(_)
    ) {
        return Some(format!("is a `{}` node", handler.kind.name()));
    }
    let own = [
        ("on-error", handler.on_error.is_some()),
        ("deadline", handler.deadline.is_some()),
        ("remind", handler.remind.is_some()),
        ("compensate-with", handler.compensate_with.is_some()),
    ];
    own.iter()
        .find(|(_, has)| *has)
        .map(|(field, _)| format!("has its own `{field}`"))
}

/// The handlers of `nodes`, each once.
pub(super) fn handlers(nodes: &[Node]) -> Vec<NodeIndex> {
    let mut handlers: Vec<NodeIndex> = nodes.iter().filter_map(|n| n.compensate_with).collect();
    handlers.sort_unstable_by_key(|index| index.0);
    handlers.dedup();
    handlers
}
