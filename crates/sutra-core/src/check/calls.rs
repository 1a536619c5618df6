//! `call`: another flow of the document, run as an instance of its own, from a `call` node or a
//! `for-each` body; and flows without a `start`, which only a call runs.
//!
//! A call may name a flow further down the document, so the names are only resolved once every
//! flow is read: reading a call records a [`Reference`], and [`resolve`] checks them all at the
//! end.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Span, did_you_mean};
use crate::expr::{INSTANCE_ROOTS, Template};
use crate::model::{CallSpec, NodeKind};
use crate::yaml::Entry;

use super::nodes::Site;
use super::reader::{Checker, Record, listing};

/// The fields of a call, a `call` node's or a `for-each` body's.
pub(super) const FIELDS: &[&str] = &["flow", "input"];

/// How a call's map looks, for the hint of a malformed one.
pub(super) const EXAMPLE: &str = "{ flow: shipping, input: {...} }";

/// A call as read, waiting for every flow's name to be known.
pub(super) struct Reference {
    /// The flow the call is in.
    caller: String,
    /// The flow it names.
    callee: String,
    /// "the `call` of node `ship`".
    what: String,
    /// The `flow` value.
    at: Span,
}

pub(super) fn call(cx: &mut Checker, site: &Site, kind: &Entry) -> Option<NodeKind> {
    let record = site.spec(cx, kind, FIELDS, EXAMPLE)?;
    call_spec(cx, site, &record, INSTANCE_ROOTS).map(NodeKind::Call)
}

/// The call in `record`, a `call` node's map or a `for-each` body's; its `input` may use the
/// names in `roots`.
pub(super) fn call_spec(
    cx: &mut Checker,
    site: &Site,
    record: &Record,
    roots: &[&str],
) -> Option<CallSpec> {
    let flow = cx
        .required(
            record,
            "flow",
            "add `flow: <flow name>`: the flow of this document to run",
        )
        .and_then(|node| {
            let name = cx.text(node, &record.label("flow"))?;
            cx.calls.push(Reference {
                caller: site.outline.flow.to_owned(),
                callee: name.to_owned(),
                what: record.what.clone(),
                at: node.span,
            });
            Some(name)
        });
    let input = record
        .get("input")
        .and_then(|node| cx.template(node, &record.label("input"), roots));
    Some(CallSpec {
        flow: flow?.to_owned(),
        input: input.unwrap_or(Template::Literal(Json::Null)),
    })
}

/// Checks the calls read from the document's flows, `flows` (the `flows:` map's entries, every
/// one of them, malformed or not: a call naming a malformed flow is not also unknown).
pub(super) fn resolve(cx: &mut Checker, flows: &[Entry]) {
    let references = std::mem::take(&mut cx.calls);
    let mut names: Vec<&str> = flows.iter().map(|entry| entry.key.as_str()).collect();
    names.sort_unstable();
    let (known, unknown): (Vec<&Reference>, Vec<&Reference>) = references
        .iter()
        .partition(|reference| names.binary_search(&reference.callee.as_str()).is_ok());
    for reference in unknown {
        report_unknown(cx, reference, &names);
    }
    require_start_or_caller(cx, flows, &known);
    warn_cycles(cx, &names, &known);
}

fn report_unknown(cx: &mut Checker, reference: &Reference, names: &[&str]) {
    let callee = reference.callee.as_str();
    let defined = format!(
        "flows in this document: {}",
        listing(names.iter().copied(), "and")
    );
    let hint = match did_you_mean(callee, names.iter().copied()) {
        Some(close) => format!("did you mean `{close}`? {defined}"),
        None => defined,
    };
    cx.report(
        Diagnostic::error(
            "unknown-flow",
            reference.at,
            format!(
                "{} names flow `{callee}`, which this document does not define",
                reference.what
            ),
        )
        .with_hint(hint),
    );
}

/// A flow runs when a message on its `start` channel comes in, or when another flow calls it:
/// one with neither could never run. A flow calling itself does not count, for the same reason.
fn require_start_or_caller(cx: &mut Checker, flows: &[Entry], calls: &[&Reference]) {
    let called: BTreeSet<&str> = calls
        .iter()
        .filter(|call| call.callee != call.caller)
        .map(|call| call.callee.as_str())
        .collect();
    // A flow that is not a map was reported as such already.
    let uncalled = flows.iter().filter(|entry| {
        entry.value.as_map().is_some()
            && entry.value.entry("start").is_none()
            && !called.contains(entry.key.as_str())
    });
    for entry in uncalled {
        let flow = entry.key.as_str();
        cx.report(
            Diagnostic::error(
                "missing-field",
                entry.key_span,
                format!("flow `{flow}` has no `start` and no flow calls it"),
            )
            .with_hint(format!(
                "add `start: {{ channel: <channel name> }}`, or call it from another flow with \
                 `call: {{ flow: {flow} }}`"
            )),
        );
    }
}

/// Whether a flow's calls are being followed or have been.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Visit {
    /// On the path from the flow the search started at, at this position.
    OnPath(usize),
    Done,
}

/// Warns once about each cycle of flows calling one another: each call nests the child one
/// level deeper, so a cycle only ends where a choice stops calling. A depth-first search over
/// flow → called flows, in name order so that the warnings do not depend on the document's
/// order; each edge that leads back onto the path closes one cycle, and is where it is reported.
/// The search keeps its path on a stack of its own: a document may hold a long chain of calls.
fn warn_cycles(cx: &mut Checker, names: &[&str], calls: &[&Reference]) {
    // Flow → the flows it calls, each with the first call naming it.
    let mut graph: BTreeMap<&str, BTreeMap<&str, &Reference>> =
        names.iter().map(|&name| (name, BTreeMap::new())).collect();
    for &call in calls {
        if let Some(callees) = graph.get_mut(call.caller.as_str()) {
            callees.entry(call.callee.as_str()).or_insert(call);
        }
    }
    let mut visits: HashMap<&str, Visit> = HashMap::new();
    for (&root, callees) in &graph {
        if visits.contains_key(root) {
            continue;
        }
        visits.insert(root, Visit::OnPath(0));
        let mut path = vec![(root, callees.iter())];
        while let Some((flow, callees)) = path.last_mut() {
            let Some((&callee, &call)) = callees.next() else {
                visits.insert(*flow, Visit::Done);
                path.pop();
                continue;
            };
            match visits.get(callee) {
                Some(Visit::Done) => {}
                Some(&Visit::OnPath(from)) => {
                    let cycle: Vec<&str> = path[from..].iter().map(|(on, _)| *on).collect();
                    warn_cycle(cx, &cycle, call);
                }
                None => {
                    visits.insert(callee, Visit::OnPath(path.len()));
                    path.push((callee, graph[callee].iter()));
                }
            }
        }
    }
}

/// Warns about `cycle` (flows in calling order, the last calling the first), closed by `call`.
fn warn_cycle(cx: &mut Checker, cycle: &[&str], call: &Reference) {
    let message = match cycle {
        [flow] => format!("flow `{flow}` calls itself"),
        _ => {
            let chain: Vec<String> = cycle
                .iter()
                .chain(&cycle[..1])
                .map(|flow| format!("`{flow}`"))
                .collect();
            format!("flows {} call one another", chain.join(" → "))
        }
    };
    cx.report(
        Diagnostic::warning("call-cycle", call.at, message).with_hint(
            "each call nests one level deeper; past `sutra.call.max-depth` (16) the instance \
             fails with `SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED`: make sure a choice ends the \
             recursion",
        ),
    );
}
