//! `race`: two arms or more, each waiting for a message (`receive`) or a time (`wait`); the
//! first to fire wins, and the race goes on where that arm says.

use crate::diagnostic::Diagnostic;
use crate::model::{After, ArmWait, NodeKind, RaceArm};
use crate::yaml::{self, Entry};

use super::nodes::{KINDS, Site, VARIABLE, WAIT_FIELDS, awaited, spec_of, wait_spec};
use super::reader::{Checker, Record, suggestion};

/// The fields of an arm.
const ARM_FIELDS: &[&str] = &["receive", "wait", "output", "next"];

const ARM_EXAMPLE: &str = "{ receive: { channel: payments, key: vars.input.orderId }, next: ship }";

/// A receive arm as read, for the check that no two arms wait for the same message.
struct Awaits<'y> {
    number: usize,
    channel: String,
    key: String,
    at: &'y yaml::Node,
}

pub(super) fn race(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let what = format!("the `race` of {}", site.what);
    let example = "race: [{ receive: {...}, next: a }, { wait: { duration: PT1H }, next: b }]";
    let items = cx.list(&kind.value, &what, example)?;
    if items.len() < 2 {
        let count = if items.is_empty() {
            "no arms"
        } else {
            "only one arm"
        };
        cx.report(
            Diagnostic::error(
                "invalid-value",
                kind.value.span,
                format!("{what} has {count}"),
            )
            .with_hint("a race needs two arms or more: with one, use a `receive` or `wait` node"),
        );
    }
    let mut awaits = Vec::new();
    let arms: Vec<Option<RaceArm>> = (1..)
        .zip(items)
        .map(|(number, item)| arm(cx, site, &what, number, item, &mut awaits))
        .collect();
    duplicates(cx, &what, &awaits);
    let arms = arms.into_iter().collect::<Option<Vec<_>>>()?;
    (arms.len() >= 2).then_some(NodeKind::Race(arms))
}

/// Arm `number` of the race `race` ("the `race` of node `settle`").
fn arm<'y>(
    cx: &mut Checker,
    site: &Site,
    race: &str,
    number: usize,
    item: &'y yaml::Node,
    awaits: &mut Vec<Awaits<'y>>,
) -> Option<RaceArm> {
    let what = format!("arm {number} of {race}");
    let at = item
        .as_map()
        .and_then(|entries| entries.first())
        .map_or(item.span, |entry| entry.key_span);
    let record = cx.record(item, what, at, ARM_EXAMPLE)?;
    arm_fields(cx, &record);
    let waits = match (record.entry("receive"), record.entry("wait")) {
        (Some(receive), None) => receive_arm(cx, site, &record, receive, number, awaits),
        (None, Some(wait)) => {
            if let Some(output) = record.entry("output") {
                cx.report(
                    Diagnostic::error(
                        "misplaced-field",
                        output.key_span,
                        format!("`output` does not apply to a `wait` arm ({})", record.what),
                    )
                    .with_hint(
                        "a `wait` arm receives nothing to store: remove `output`, or move it to \
                         a `receive` arm",
                    ),
                );
            }
            let record = spec_of(cx, wait, &record.what, WAIT_FIELDS, "{ duration: PT1H }")?;
            wait_spec(cx, &record).map(ArmWait::Wait)
        }
        (Some(_), Some(wait)) => {
            cx.report(
                Diagnostic::error(
                    "multiple-kinds",
                    wait.key_span,
                    format!("{} has both `receive` and `wait`", record.what),
                )
                .with_hint("an arm waits for one thing: make them two arms of the race"),
            );
            None
        }
        (None, None) => {
            // An arm of another kind was reported as such already.
            if !record.entries.iter().any(|entry| is_node_kind(&entry.key)) {
                cx.report(
                    Diagnostic::error(
                        "missing-kind",
                        record.at,
                        format!("{} waits for nothing", record.what),
                    )
                    .with_hint(
                        "add `receive: { channel: <channel name>, key: <expression> }` or \
                         `wait: { duration: PT1H }`",
                    ),
                );
            }
            None
        }
    };
    let output = record
        .get("output")
        .filter(|_| record.entry("wait").is_none())
        .and_then(|node| cx.named(node, &record.label("output"), &VARIABLE));
    let next = record
        .get("next")
        .and_then(|target| site.jump(cx, target, &record.label("next")));
    Some(RaceArm {
        waits: waits?,
        output: output.map(str::to_owned),
        after: next.map_or_else(|| site.outline.following(site.index), After::Node),
    })
}

fn is_node_kind(key: &str) -> bool {
    KINDS.contains(&key) && !["receive", "wait"].contains(&key)
}

/// Reports the arm's fields that are not an arm's: a node kind a race cannot wait for, or an
/// unknown field.
fn arm_fields(cx: &mut Checker, record: &Record) {
    for entry in record.entries {
        let key = entry.key.as_str();
        if ARM_FIELDS.contains(&key) {
            continue;
        }
        let diagnostic = if is_node_kind(key) {
            Diagnostic::error(
                "invalid-race-arm",
                entry.key_span,
                format!("{} is a `{key}`, which a race cannot wait for", record.what),
            )
            .with_hint(
                "a race waits for a message (`receive`) or a time (`wait`); put a `task` on \
                 the path after the arm instead",
            )
        } else {
            Diagnostic::error(
                "unknown-field",
                entry.key_span,
                format!("unknown field `{key}` in {}", record.what),
            )
            .with_hint(suggestion(key, ARM_FIELDS, "the fields of an arm are"))
        };
        cx.report(diagnostic);
    }
}

fn receive_arm<'y>(
    cx: &mut Checker,
    site: &Site,
    arm: &Record<'y>,
    receive: &'y Entry,
    number: usize,
    awaits: &mut Vec<Awaits<'y>>,
) -> Option<ArmWait> {
    let example = "{ channel: payments, key: vars.input.orderId }";
    let record = spec_of(cx, receive, &arm.what, &["channel", "key"], example)?;
    let (channel, key) = awaited(cx, site, &record, &arm.what)?;
    let (channel, key) = (channel?, key?);
    if let Some(at) = record.get("key") {
        awaits.push(Awaits {
            number,
            channel: channel.clone(),
            key: key.source().trim().to_owned(),
            at,
        });
    }
    Some(ArmWait::Receive { channel, key })
}

/// Two receive arms on the same channel with the same key wait for the same message: only one
/// of them could ever win.
fn duplicates(cx: &mut Checker, race: &str, awaits: &[Awaits]) {
    for (later, arm) in awaits.iter().enumerate() {
        let Some(first) = awaits[..later]
            .iter()
            .find(|earlier| earlier.channel == arm.channel && earlier.key == arm.key)
        else {
            continue;
        };
        cx.report(
            Diagnostic::error(
                "duplicate-correlation",
                arm.at.span,
                format!(
                    "arms {} and {} of {race} both wait on channel `{}` with key `{}`",
                    first.number, arm.number, arm.channel, arm.key
                ),
            )
            .with_hint(
                "two arms cannot wait for the same message: give each its own channel or key",
            ),
        );
    }
}
