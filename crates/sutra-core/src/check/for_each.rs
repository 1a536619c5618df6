//! `for-each`: a body run once per item of a list, at most `concurrency` at a time. The body is a
//! task for now; its templates see the instance, the item (under `item`, or the `as` name) and
//! the item's position, `index`.

use serde_json::Value as Json;

use crate::diagnostic::Diagnostic;
use crate::expr::{INSTANCE_ROOTS, Template};
use crate::model::{Body, ForEachSpec, NodeKind};
use crate::yaml::{self, Entry};

use super::nodes::{KINDS, Site, TASK_EXAMPLE, TASK_FIELDS, VARIABLE, spec_of, task_spec};
use super::reader::{Checker, Record, suggestion};

/// The fields of a `for-each`'s map.
const FIELDS: &[&str] = &["items", "as", "concurrency", "task"];

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
    let body = match record.entry("task") {
        Some(task) => {
            let body_record = spec_of(cx, task, &record.what, TASK_FIELDS, TASK_EXAMPLE);
            // The item's name as written, valid or not: a refused `as` was reported already,
            // and its uses in the body are not mistakes of their own.
            let name = record
                .get("as")
                .and_then(yaml::Node::as_str)
                .unwrap_or(ITEM_DEFAULT);
            let roots: Vec<&str> = INSTANCE_ROOTS
                .iter()
                .copied()
                .chain([name, INDEX])
                .collect();
            body_record
                .and_then(|body| task_spec(cx, &body, &roots))
                .map(Body::Task)
        }
        None => {
            // A body of another kind was reported as such already.
            if !other_body {
                cx.report(
                    Diagnostic::error(
                        "missing-kind",
                        record.at,
                        format!("{} has no body", record.what),
                    )
                    .with_hint(
                        "add `task: { topic: <name>, input: {...} }`: the task runs once per item",
                    ),
                );
            }
            None
        }
    };
    Some(NodeKind::ForEach(ForEachSpec {
        items: items?,
        item: item?,
        concurrency: concurrency_ok.then_some(concurrency)?,
        body: body?,
    }))
}

/// Reports the fields that are not a `for-each`'s; returns whether one of them is a body the
/// `for-each` cannot run (yet).
fn unknown_fields(cx: &mut Checker, record: &Record) -> bool {
    let mut other_body = false;
    for entry in record.entries {
        let key = entry.key.as_str();
        if FIELDS.contains(&key) {
            continue;
        }
        let hint = if key == "call" || KINDS.contains(&key) {
            other_body = true;
            "the body of a `for-each` is a `task` for now (`call:` bodies come with sub-flows): \
             write `task: { topic: <name>, input: {...} }`"
                .to_owned()
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
