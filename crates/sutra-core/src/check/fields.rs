//! The node-level fields that only some kinds of node accept, and what to do instead of a
//! misplaced one.

use crate::diagnostic::Diagnostic;

use super::reader::{Checker, Record};

/// The kinds of node that wait, and so may have a `deadline` and a `remind`.
pub(super) const WAITING_KINDS: &[&str] = &["task", "receive", "for-each", "call"];

/// The kinds that may have a `deadline`: those that wait, and a `scope`, whose block it bounds.
pub(super) const DEADLINE_KINDS: &[&str] = &["task", "receive", "for-each", "call", "scope"];

/// What to do instead of a `next` or an `output` on a `race` node.
const RACE_FIELD_HINT: &str =
    "a `race` goes on through the arm that wins: put `next` and `output` on its arms";

/// Node-level fields that only some kinds accept, and what to do instead.
const RESTRICTED_FIELDS: &[(&str, &[&str], &str)] = &[
    (
        "output",
        &["task", "receive", "for-each", "call"],
        "only a task's result, a received message, a `for-each`'s results or a called flow's \
         reply are stored with `output`; remove it",
    ),
    (
        "on-error",
        &["task", "for-each", "call", "scope"],
        "only a task's business error, a called flow's failure, a failed `for-each` body or a \
         failure inside a `scope` goes to `on-error`; remove it",
    ),
    (
        "otherwise",
        &["choice"],
        "only a `choice` has an `otherwise`; use `next` to jump unconditionally",
    ),
    (
        "next",
        &[
            "set",
            "task",
            "emit",
            "receive",
            "wait",
            "parallel",
            "for-each",
            "call",
            "scope",
            "compensate",
        ],
        "a `choice` goes on through its arms or `otherwise`, and `end` and `fail` stop the instance; remove `next`",
    ),
    (
        "compensate-with",
        &["task", "call", "emit", "set", "for-each"],
        "only a node whose work can be undone (`task`, `call`, `emit`, `set`, `for-each`) has a \
         compensation handler; remove it",
    ),
    (
        "deadline",
        DEADLINE_KINDS,
        "only a node that waits (`task`, `receive`, `for-each`, `call`) or a `scope` has a deadline; to bound a `wait`, shorten it, or use a `race` with a `wait` arm",
    ),
    (
        "remind",
        WAITING_KINDS,
        "only a node that waits (`task`, `receive`, `for-each`, `call`) has a reminder; put `remind` on the node it is about, or remove it",
    ),
];

pub(super) fn check_restricted_fields(cx: &mut Checker, record: &Record, kind: &str) {
    for &(field, kinds, hint) in RESTRICTED_FIELDS {
        if let Some(entry) = record.entry(field).filter(|_| !kinds.contains(&kind)) {
            let hint = match (kind, field) {
                ("race", "next" | "output") => RACE_FIELD_HINT,
                ("race", "deadline") => {
                    "a `race` is bounded by a `wait` arm: add one, such as \
                     `- wait: { duration: P2D }` with its `next`"
                }
                _ => hint,
            };
            cx.report(
                Diagnostic::error(
                    "misplaced-field",
                    entry.key_span,
                    format!(
                        "`{field}` does not apply to `{kind}` nodes ({})",
                        record.what
                    ),
                )
                .with_hint(hint),
            );
        }
    }
}
