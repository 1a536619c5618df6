//! `for-each`: a body run once per item of a list, at most `concurrency` at a time. The body is a
//! task or a call; its templates see the instance, the item (under `item`, or the `as` name) and
//! the item's position, `index`.

use serde_json::Value as Json;

use crate::diagnostic::Diagnostic;
use crate::expr::{INSTANCE_ROOTS, Template};
use crate::model::{Body, ForEachSpec, NodeKind};
use crate::yaml::{self, Entry};

use super::calls;
use super::nodes::{KINDS, Site, TASK_EXAMPLE, TASK_FIELDS, VARIABLE, spec_of, task_spec};
use super::reader::{Checker, Record, suggestion};

/// The fields of a `for-each`'s map.
const FIELDS: &[&str] = &["items", "as", "concurrency", "task", "call"];

/// The kinds a body may be, one of them.
const BODIES: &[&str] = &["task", "call"];

/// How a body looks, either kind.
const BODY_EXAMPLES: &str =
    "`task: { topic: <name>, input: {...} }` or `call: { flow: <flow name>, input: {...} }`";

/// The name the body sees the item under when `as` does not say.
pub(super) const ITEM_DEFAULT: &str = "item";

/// The name the body sees the item's position under, from 0.
pub(super) const INDEX: &str = "index";

/// The names an item may not take, and what naming it so would hide from the body.
const SHADOWED: &[(&str, &str)] = &[
    ("vars", "the instance's variables"),
    ("msg", "the last message received"),
    ("instance", "the instance's own fields"),
    ("now", "the current time"),
    (INDEX, "the item's position"),
];

const EXAMPLE: &str = "{ items: \"= vars.input.items\", task: { topic: reserve-stock, input: { sku: \"= item.sku\" } } }";

pub(super) fn for_each(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let what = format!("the `for-each` of {}", site.what);
    let record = cx.record(&kind.value, what, kind.key_span, EXAMPLE)?;
    let other_body = unknown_fields(cx, &record);
    let items = cx
        .required(
            &record,
            "items",
            "add `items:` with the list to loop over, such as `items: \"= vars.input.items\"`",
        )
        .and_then(|node| items(cx, node, &record.label("items")));
    let item = item_name(cx, &record);
    let concurrency = record
        .get("concurrency")
        .and_then(|node| concurrency(cx, node, &record.label("concurrency")));
    let concurrency_ok = record.get("concurrency").is_none() || concurrency.is_some();
    let body = body(cx, site, &record, other_body);
    Some(NodeKind::ForEach(ForEachSpec {
        items: items?,
        item: item?,
        concurrency: concurrency_ok.then_some(concurrency)?,
        body: body?,
    }))
}

/// The body, a task or a call: exactly one of them. Both are read when both are written, so
/// that their own mistakes are reported too; `other_body` tells that a body of another kind was
/// reported already.
fn body(cx: &mut Checker, site: &Site, record: &Record, other_body: bool) -> Option<Body> {
    let roots = body_roots(record);
    let task = record.entry("task").and_then(|task| {
        let body = spec_of(cx, task, &record.what, TASK_FIELDS, TASK_EXAMPLE)?;
        task_spec(cx, &body, &roots).map(Body::Task)
    });
    let call = record.entry("call").and_then(|call| {
        let body = spec_of(cx, call, &record.what, calls::FIELDS, calls::EXAMPLE)?;
        calls::call_spec(cx, site, &body, &roots).map(Body::Call)
    });
    let written: Vec<&Entry> = record
        .entries
        .iter()
        .filter(|entry| BODIES.contains(&entry.key.as_str()))
        .collect();
    match written[..] {
        [_] => task.or(call),
        [] => {
            if !other_body {
                cx.report(
                    Diagnostic::error(
                        "missing-kind",
                        record.at,
                        format!("{} has no body", record.what),
                    )
                    .with_hint(format!("add {BODY_EXAMPLES}: the body runs once per item")),
                );
            }
            None
        }
        [first, second, ..] => {
            cx.report(
                Diagnostic::error(
                    "multiple-kinds",
                    second.key_span,
                    format!(
                        "{} has two bodies, `{}` and `{}`",
                        record.what, first.key, second.key
                    ),
                )
                .with_hint(
                    "a body does one thing: keep one, and call a flow if it needs several steps",
                ),
            );
            None
        }
    }
}

/// The names a body's templates may use: the instance's, the item's and its position's.
fn body_roots<'r>(record: &Record<'r>) -> Vec<&'r str> {
    // The item's name as written, valid or not: a refused `as` was reported already, and its
    // uses in the body are not mistakes of their own.
    let name = record
        .get("as")
        .and_then(yaml::Node::as_str)
        .unwrap_or(ITEM_DEFAULT);
    INSTANCE_ROOTS
        .iter()
        .copied()
        .chain([name, INDEX])
        .collect()
}

/// Reports the fields that are not a `for-each`'s; returns whether one of them is a body the
/// `for-each` cannot run.
fn unknown_fields(cx: &mut Checker, record: &Record) -> bool {
    let mut other_body = false;
    for entry in record.entries {
        let key = entry.key.as_str();
        if FIELDS.contains(&key) {
            continue;
        }
        let hint = if KINDS.contains(&key) {
            other_body = true;
            format!("the body of a `for-each` is a `task` or a `call`: write {BODY_EXAMPLES}")
        } else {
            suggestion(key, FIELDS, "the fields here are")
        };
        cx.report(
            Diagnostic::error(
                "unknown-field",
                entry.key_span,
                format!("unknown field `{key}` in {}", record.what),
            )
            .with_hint(hint),
        );
    }
    other_body
}

/// The list to loop over: an expression, or a literal list. Literal text or a map is never one.
fn items(cx: &mut Checker, node: &yaml::Node, label: &str) -> Option<Template> {
    let template = cx.template(node, label, INSTANCE_ROOTS)?;
    match template {
        Template::Expr(_) | Template::List(_) | Template::Literal(Json::Array(_)) => Some(template),
        Template::Map(_) | Template::Literal(_) => {
            cx.report(
                Diagnostic::error(
                    "wrong-type",
                    node.span,
                    format!(
                        "{label} must be a list or an expression giving one, not {}",
                        node.describe()
                    ),
                )
                .with_hint("write an expression, such as `items: \"= vars.input.items\"`, or a list such as `[a, b]`"),
            );
            None
        }
    }
}

/// How many bodies may run at once: 1 or more.
fn concurrency(cx: &mut Checker, node: &yaml::Node, label: &str) -> Option<u32> {
    if let yaml::Value::Int(n) = node.value
        && n < 1
    {
        cx.report(
            Diagnostic::error(
                "invalid-value",
                node.span,
                format!("{label} must be 1 or more, not {n}"),
            )
            .with_hint(
                "give how many bodies may run at once, such as `concurrency: 5`, or remove it \
                 to run them for every item at once",
            ),
        );
        return None;
    }
    cx.count(node, label, 1)
}

/// The name the body sees the item under: `as`, else `item`.
fn item_name(cx: &mut Checker, record: &Record) -> Option<String> {
    let Some(node) = record.get("as") else {
        return Some(ITEM_DEFAULT.to_owned());
    };
    let name = cx.named(node, &record.label("as"), &VARIABLE)?;
    if let Some((_, hidden)) = SHADOWED.iter().find(|(taken, _)| *taken == name) {
        cx.report(
            Diagnostic::error(
                "shadowed-name",
                node.span,
                format!(
                    "`as: {name}` would hide {hidden} in the body's templates ({})",
                    record.what
                ),
            )
            .with_hint("name the item, such as `as: item`"),
        );
        return None;
    }
    Some(name.to_owned())
}
