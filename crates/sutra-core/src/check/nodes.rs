//! Nodes: exactly one kind each, the kind's own fields, and the node-level fields that only
//! some kinds accept. A `race`'s arms are read in [`super::race`], a `for-each` in
//! [`super::for_each`], a `call` in [`super::calls`], a waiting node's `deadline` and `remind` in
//! [`super::boundary`], which node-level fields each kind accepts in [`super::fields`].

use serde_json::Value as Json;

use crate::diagnostic::Diagnostic;
use crate::expr::{Expr, INSTANCE_ROOTS, Template};
use crate::model::{
    After, ChoiceArm, ChoiceSpec, EmitSpec, Node, NodeIndex, NodeKind, ReceiveSpec,
    TASK_BACKOFF_DEFAULT, TASK_LOCK_DEFAULT, TASK_RETRIES_DEFAULT, TaskSpec, WaitSpec,
};
use crate::yaml::{self, Entry};

use super::channels::Channels;
use super::fields::{DEADLINE_KINDS, WAITING_KINDS, check_restricted_fields};
use super::flows::Outline;
use super::reader::{Checker, NameRule, Record, Zero, listing, suggestion};
use super::{boundary, calls, compensation, for_each, race, scope};

pub(super) const KINDS: &[&str] = &[
    "set",
    "task",
    "emit",
    "receive",
    "wait",
    "choice",
    "parallel",
    "race",
    "for-each",
    "call",
    "scope",
    "compensate",
    "end",
    "fail",
];

/// The fields of a node besides its kind.
const NODE_FIELDS: &[&str] = &[
    "id",
    "next",
    "output",
    "on-error",
    "otherwise",
    "deadline",
    "remind",
    "compensate-with",
];

/// Variable names: expressions read them as `vars.name`.
pub(super) const VARIABLE: NameRule = NameRule {
    first: |c| c.is_ascii_alphabetic() || c == '_',
    rest: |c| c.is_ascii_alphanumeric() || c == '_',
    max_chars: 64,
    hint: "a variable name is a letter or `_` followed by letters, digits and `_`, so that expressions can read it as `vars.name`",
};

/// The node being built and what it needs from its flow.
pub(super) struct Site<'o, 'a> {
    pub outline: &'o Outline<'a>,
    pub channels: &'o Channels,
    pub index: NodeIndex,
    /// "node `debit`".
    pub what: String,
}

impl Site<'_, '_> {
    pub fn jump(&self, cx: &mut Checker, target: &yaml::Node, label: &str) -> Option<NodeIndex> {
        self.outline.jump(cx, self.index, target, label)
    }

    /// The kind's own map, e.g. the `{ topic: …, input: … }` of `task:`.
    pub fn spec<'y>(
        &self,
        cx: &mut Checker,
        kind: &'y Entry,
        fields: &[&str],
        example: &str,
    ) -> Option<Record<'y>> {
        spec_of(cx, kind, &self.what, fields, example)
    }

    fn template(&self, cx: &mut Checker, record: &Record, field: &str) -> Option<Template> {
        let node = record.get(field)?;
        cx.template(node, &record.label(field), INSTANCE_ROOTS)
    }
}

/// The map under `kind`, a field of `owner` ("node `debit`", "arm 2 of the `race` of node
/// `settle`"), with its unknown fields reported.
pub(super) fn spec_of<'y>(
    cx: &mut Checker,
    kind: &'y Entry,
    owner: &str,
    fields: &[&str],
    example: &str,
) -> Option<Record<'y>> {
    let what = format!("the `{}` of {owner}", kind.key);
    let record = cx.record(&kind.value, what, kind.key_span, example)?;
    cx.unknown_fields(&record, fields);
    Some(record)
}

/// Builds the node at `index`. Where it has errors (all of them reported), parts of it are
/// placeholders or defaults: the model is dropped when there is any error.
pub(super) fn build(
    cx: &mut Checker,
    outline: &Outline,
    index: NodeIndex,
    channels: &Channels,
) -> Node {
    let slot = outline.slot(index);
    let what = match slot.id {
        Some(id) => format!("node `{id}`"),
        None => format!("a node of flow `{}`", outline.flow),
    };
    let site = Site {
        outline,
        channels,
        index,
        what,
    };
    let placeholder = Node {
        id: slot.id.unwrap_or_default().to_owned(),
        kind: NodeKind::End { reply: None },
        output: None,
        on_error: None,
        after: After::End,
        deadline: None,
        remind: None,
        compensate_with: None,
    };
    let example = "{ id: done, end: {} }";
    let Some(record) = cx.record(slot.node, site.what.clone(), slot.at, example) else {
        return placeholder;
    };
    cx.required(
        &record,
        "id",
        "add `id: <name>`: jumps and the instance history name nodes by id",
    );
    let kind = the_kind(cx, &record);
    if let Some(kind) = kind {
        check_restricted_fields(cx, &record, &kind.key);
    }
    // Only on a kind that takes them: elsewhere they were reported as misplaced.
    let waits = kind.filter(|kind| WAITING_KINDS.contains(&kind.key.as_str()));
    let bounded = kind.filter(|kind| DEADLINE_KINDS.contains(&kind.key.as_str()));
    let deadline = bounded.and_then(|kind| boundary::deadline(cx, &site, &record, kind));
    let remind = waits.and_then(|_| boundary::remind(cx, &site, &record));
    let kind = kind.and_then(|kind| kind_of(cx, &site, &record, kind));
    let label = |field: &str| record.label(field);
    let next = record
        .get("next")
        .and_then(|node| site.jump(cx, node, &label("next")));
    Node {
        kind: kind.unwrap_or(placeholder.kind),
        output: record
            .get("output")
            .and_then(|node| cx.named(node, &label("output"), &VARIABLE))
            .map(str::to_owned),
        on_error: record
            .get("on-error")
            .and_then(|node| site.jump(cx, node, &label("on-error"))),
        after: next.map_or_else(|| outline.following(index), After::Node),
        deadline,
        remind,
        compensate_with: record
            .get("compensate-with")
            .and_then(|node| outline.find(cx, node, &label("compensate-with"))),
        ..placeholder
    }
}

/// The one kind of the node, after reporting unknown fields, a missing kind, or a second one.
fn the_kind<'y>(cx: &mut Checker, record: &Record<'y>) -> Option<&'y Entry> {
    let kinds: Vec<&Entry> = record
        .entries
        .iter()
        .filter(|entry| KINDS.contains(&entry.key.as_str()))
        .collect();
    let known: Vec<&str> = NODE_FIELDS.iter().chain(KINDS).copied().collect();
    let unknown = record
        .entries
        .iter()
        .filter(|entry| !known.contains(&entry.key.as_str()));
    let kinds_listing = listing(KINDS.iter().copied(), "or");
    let mut unknown_kind = false;
    for entry in unknown {
        // Without a known kind, an unknown key is most likely a misspelt or invented kind.
        let diagnostic = if kinds.is_empty() {
            unknown_kind = true;
            Diagnostic::error(
                "unknown-kind",
                entry.key_span,
                format!("unknown node kind `{}` in {}", entry.key, record.what),
            )
            .with_hint(suggestion(&entry.key, KINDS, "a node's kind is one of"))
        } else {
            Diagnostic::error(
                "unknown-field",
                entry.key_span,
                format!("unknown field `{}` in {}", entry.key, record.what),
            )
            .with_hint(suggestion(&entry.key, &known, "the fields of a node are"))
        };
        cx.report(diagnostic);
    }
    match kinds[..] {
        [] if unknown_kind => None,
        [] => {
            cx.report(
                Diagnostic::error(
                    "missing-kind",
                    record.at,
                    format!("{} has no kind", record.what),
                )
                .with_hint(format!("add exactly one of {kinds_listing}")),
            );
            None
        }
        [kind] => Some(kind),
        [first, second, ..] => {
            cx.report(
                Diagnostic::error(
                    "multiple-kinds",
                    second.key_span,
                    format!(
                        "{} has two kinds, `{}` and `{}`",
                        record.what, first.key, second.key
                    ),
                )
                .with_hint("a node does one thing: split it into two nodes, one after the other"),
            );
            None
        }
    }
}

fn kind_of(cx: &mut Checker, site: &Site, node: &Record, kind: &Entry) -> Option<NodeKind> {
    match kind.key.as_str() {
        "set" => set(cx, site, kind),
        "task" => task(cx, site, kind),
        "emit" => emit(cx, site, kind),
        "receive" => receive(cx, site, kind),
        "wait" => wait(cx, site, kind),
        "choice" => choice(cx, site, node, kind),
        "parallel" => parallel(site),
        "race" => race::race(cx, site, kind),
        "for-each" => for_each::for_each(cx, site, kind),
        "call" => calls::call(cx, site, kind),
        "scope" => scope::scope(cx, site, kind),
        "compensate" => compensation::compensate(cx, site, kind),
        "end" => end(cx, site, kind),
        // `the_kind` only returns keys from KINDS: this is `fail`.
        _ => fail(cx, site, kind),
    }
}

fn set(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let what = format!("the `set` of {}", site.what);
    let example = "set: { total: \"= vars.price * vars.quantity\" }";
    let entries = cx.map(&kind.value, &what, example)?;
    let assignments: Vec<Option<(String, Template)>> = entries
        .iter()
        .map(|entry| {
            let label = format!("variable `{}` in {what}", entry.key);
            let named = cx.name_ok(&entry.key, entry.key_span, &label, &VARIABLE);
            let template = cx.template(&entry.value, &label, INSTANCE_ROOTS)?;
            named.then(|| (entry.key.clone(), template))
        })
        .collect();
    assignments
        .into_iter()
        .collect::<Option<_>>()
        .map(NodeKind::Set)
}

/// A task topic: workers poll by it, and it is a key of the store's task index, so it is a name,
/// not free text.
pub(super) const TOPIC_NAME: NameRule = NameRule {
    first: |c| c.is_ascii_alphanumeric(),
    rest: |c| c.is_ascii_alphanumeric() || "-_.:/".contains(c),
    max_chars: 200,
    hint: "use 1 to 200 letters, digits and `-_.:/`, starting with a letter or a digit, such as `debit-account`",
};

/// The fields of a task, a `task` node's or a `for-each` body's.
pub(super) const TASK_FIELDS: &[&str] = &["topic", "input", "retries", "backoff", "lock"];

/// How a task's map looks, for the hint of a malformed one.
pub(super) const TASK_EXAMPLE: &str = "{ topic: debit-account, input: {...} }";

fn task(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let record = site.spec(cx, kind, TASK_FIELDS, TASK_EXAMPLE)?;
    task_spec(cx, &record, INSTANCE_ROOTS).map(NodeKind::Task)
}

/// The task in `record`, a `task` node's map or a `for-each` body's; its `input` may use the
/// names in `roots`.
pub(super) fn task_spec(cx: &mut Checker, record: &Record, roots: &[&str]) -> Option<TaskSpec> {
    let topic = cx
        .required(
            record,
            "topic",
            "add `topic: <name>`: workers poll for tasks by topic",
        )
        .and_then(|node| cx.named(node, &record.label("topic"), &TOPIC_NAME));
    let input = record
        .get("input")
        .and_then(|node| cx.template(node, &record.label("input"), roots));
    let retries = record
        .get("retries")
        .and_then(|node| cx.count(node, &record.label("retries"), 0));
    let backoff = record
        .get("backoff")
        .and_then(|node| cx.duration(node, &record.label("backoff"), Zero::Allowed));
    let lock = record
        .get("lock")
        .and_then(|node| cx.duration(node, &record.label("lock"), Zero::Refused));
    Some(TaskSpec {
        topic: topic?.to_owned(),
        input: input.unwrap_or(Template::Literal(Json::Null)),
        retries: retries.unwrap_or(TASK_RETRIES_DEFAULT),
        backoff: backoff.unwrap_or(TASK_BACKOFF_DEFAULT),
        lock: lock.unwrap_or(TASK_LOCK_DEFAULT),
    })
}

fn emit(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let record = site.spec(
        cx,
        kind,
        &["channel", "data", "key"],
        "{ channel: ledger, data: {...} }",
    )?;
    let channel = cx.required(&record, "channel", "add `channel: <channel name>`")?;
    let declared = site.channels.lookup(cx, channel, &record.label("channel"));
    if let Some((name, declared)) = &declared {
        declared.check_emittable(cx, name, channel.span, &site.what);
    }
    let data = site.template(cx, &record, "data");
    let key = record
        .get("key")
        .and_then(|node| cx.expression(node, &record.label("key"), INSTANCE_ROOTS));
    Some(NodeKind::Emit(EmitSpec {
        channel: declared?.0,
        data: data.unwrap_or(Template::Literal(Json::Null)),
        key,
    }))
}

fn receive(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let fields = ["channel", "key", "timeout", "on-timeout"];
    let record = site.spec(
        cx,
        kind,
        &fields,
        "{ channel: replies, key: vars.input.id }",
    )?;
    let (channel, key) = awaited(cx, site, &record, &site.what)?;
    let timeout = record
        .get("timeout")
        .and_then(|node| cx.duration(node, &record.label("timeout"), Zero::Refused));
    let on_timeout = record.entry("on-timeout").and_then(|entry| {
        if record.get("timeout").is_none() {
            cx.report(
                Diagnostic::error(
                    "missing-field",
                    entry.key_span,
                    format!("`on-timeout` never fires: {} has no `timeout`", record.what),
                )
                .with_hint(
                    "add `timeout:` with how long to wait, such as P1D, or remove `on-timeout`",
                ),
            );
        }
        site.jump(cx, &entry.value, &record.label("on-timeout"))
    });
    Some(NodeKind::Receive(ReceiveSpec {
        channel: channel?,
        key: key?,
        timeout,
        on_timeout,
    }))
}

/// The `channel` and `key` of a `receive` node or a `race`'s receive arm, `who` waiting on them:
/// the channel must be declared, correlated and consumable. `None` when `channel` is missing;
/// otherwise each part is `None` when it was refused.
pub(super) fn awaited(
    cx: &mut Checker,
    site: &Site,
    record: &Record,
    who: &str,
) -> Option<(Option<String>, Option<Expr>)> {
    let channel = cx.required(record, "channel", "add `channel: <channel name>`")?;
    let declared = site.channels.lookup(cx, channel, &record.label("channel"));
    if let Some((name, declared)) = &declared {
        declared.check_receivable(cx, name, channel.span, who);
        declared.check_consumable(cx, name, channel.span, who);
    }
    let key = cx
        .required(
            record,
            "key",
            "add `key: <expression>`: it must equal the correlation key of the awaited message",
        )
        .and_then(|node| cx.expression(node, &record.label("key"), INSTANCE_ROOTS));
    Some((declared.map(|(name, _)| name), key))
}

fn wait(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let record = site.spec(cx, kind, WAIT_FIELDS, "{ duration: PT10S }")?;
    wait_spec(cx, &record).map(NodeKind::Wait)
}

/// The fields of a `wait`, a node's or a `race` arm's.
pub(super) const WAIT_FIELDS: &[&str] = &["duration", "until"];

/// What a `wait` node or a `race`'s wait arm waits for.
pub(super) fn wait_spec(cx: &mut Checker, record: &Record) -> Option<WaitSpec> {
    match (record.entry("duration"), record.entry("until")) {
        (Some(duration), None) => cx
            .duration(&duration.value, &record.label("duration"), Zero::Refused)
            .map(WaitSpec::Duration),
        (None, Some(until)) => cx
            .expression(&until.value, &record.label("until"), INSTANCE_ROOTS)
            .map(WaitSpec::Until),
        (Some(_), Some(until)) => {
            cx.report(
                Diagnostic::error(
                    "conflicting-fields",
                    until.key_span,
                    format!("{} has both `duration` and `until`", record.what),
                )
                .with_hint("keep one: `duration` waits a fixed time, `until` waits for a moment"),
            );
            None
        }
        (None, None) => {
            cx.report(
                Diagnostic::error(
                    "missing-field",
                    record.at,
                    format!("{} has neither `duration` nor `until`", record.what),
                )
                .with_hint("add `duration: PT10S` (for example) or `until: <expression>`"),
            );
            None
        }
    }
}

fn choice(cx: &mut Checker, site: &Site, node: &Record, kind: &Entry) -> Option<NodeKind> {
    let what = format!("the `choice` of {}", site.what);
    let example = "choice: [{ when: vars.amount > 100, next: review }]";
    let items = cx.list(&kind.value, &what, example)?;
    if items.is_empty() {
        cx.report(
            Diagnostic::error(
                "invalid-value",
                kind.value.span,
                format!("{what} has no arms"),
            )
            .with_hint(format!("add arms such as `{example}`, or jump with `next`")),
        );
    }
    let arms: Vec<Option<ChoiceArm>> = (1..)
        .zip(items)
        .map(|(number, item)| {
            let what = format!("arm {number} of {what}");
            let at = item
                .as_map()
                .and_then(|e| e.first())
                .map_or(item.span, |e| e.key_span);
            let record = cx.record(item, what, at, "{ when: <expression>, next: <node id> }")?;
            cx.unknown_fields(&record, &["when", "next"]);
            let when = cx
                .required(
                    &record,
                    "when",
                    "add `when:` with a condition, such as `vars.amount > 100`",
                )
                .and_then(|node| cx.expression(node, &record.label("when"), INSTANCE_ROOTS));
            let next = cx
                .required(
                    &record,
                    "next",
                    "add `next:` with the id of the node to go to",
                )
                .and_then(|node| site.jump(cx, node, &record.label("next")));
            Some(ChoiceArm {
                when: when?,
                next: next?,
            })
        })
        .collect();
    let otherwise = node
        .get("otherwise")
        .and_then(|target| site.jump(cx, target, &node.label("otherwise")));
    let arms = arms.into_iter().collect::<Option<Vec<_>>>()?;
    (!arms.is_empty()).then_some(NodeKind::Choice(ChoiceSpec { arms, otherwise }))
}

/// The branches were laid out (and their shape checked) by the first pass.
fn parallel(site: &Site) -> Option<NodeKind> {
    let lists = site.outline.slot(site.index).branches.as_ref()?;
    let heads = lists
        .iter()
        .map(|&list| site.outline.lists[list].members.first().copied())
        .collect();
    Some(NodeKind::Parallel(heads))
}

fn end(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    if kind.value.value == yaml::Value::Null {
        return Some(NodeKind::End { reply: None });
    }
    let record = site.spec(cx, kind, &["reply"], "end: { reply: { status: ok } }")?;
    Some(NodeKind::End {
        reply: site.template(cx, &record, "reply"),
    })
}

fn fail(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let record = site.spec(
        cx,
        kind,
        &["code", "detail"],
        "{ code: ORDER.REJECTED, detail: ... }",
    )?;
    let code = cx
        .required(
            &record,
            "code",
            "add `code:` with an error code, such as `ORDER.REJECTED`",
        )
        .and_then(|node| fail_code(cx, node, &record.label("code")));
    let detail = site.template(cx, &record, "detail");
    Some(NodeKind::Fail {
        code: code?.to_owned(),
        detail,
    })
}

/// `SUTRA.` codes are the engine's own (SPEC §10): a flow must not impersonate them.
fn fail_code<'y>(cx: &mut Checker, node: &'y yaml::Node, label: &str) -> Option<&'y str> {
    let code = cx.text(node, label)?;
    if code.starts_with("SUTRA.") {
        cx.report(
            Diagnostic::error(
                "invalid-value",
                node.span,
                format!("{label}: codes starting with `SUTRA.` are reserved for the engine"),
            )
            .with_hint("use a prefix of your own, such as `TRANSFER.NOT_APPROVED`"),
        );
        return None;
    }
    Some(code)
}
