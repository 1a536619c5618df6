//! The deployment checker: a YAML document in, a validated [`Deployment`] and located diagnostics
//! out (SPEC §2).
//!
//! The checker reads the whole document even after a first mistake, so that one run reports
//! every problem it can; the model it builds along the way is only handed out when no error was
//! found. `sutra check` and `POST /v1/deployments` both call [`check`], so they always agree.

mod boundary;
mod calls;
mod channels;
mod compensation;
mod fields;
mod flows;
pub use flows::FLOW_NODES_MAX;
mod for_each;
mod graph;
mod nodes;
mod race;
mod reader;
pub use reader::PERIOD_MIN;
mod schedule;
mod scope;

use crate::diagnostic::{self, Diagnostic};
use crate::model::Deployment;
use crate::yaml;

use channels::Channels;
use reader::{Checker, NameRule};

/// The outcome of checking one document.
#[derive(Debug)]
pub struct Checked {
    /// Present exactly when `diagnostics` holds no error (warnings are allowed).
    pub deployment: Option<Deployment>,
    /// Sorted by position.
    pub diagnostics: Vec<Diagnostic>,
}

impl Checked {
    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }
}

/// Checks a deployment document. Never panics, whatever the input.
pub fn check(source: &str) -> Checked {
    let root = match yaml::parse(source) {
        Ok(root) => root,
        Err(diagnostic) => {
            return Checked {
                deployment: None,
                diagnostics: vec![diagnostic],
            };
        }
    };
    let mut cx = Checker::new(source);
    let deployment = document(&mut cx, &root);
    let mut diagnostics = cx.diagnostics;
    diagnostic::sort(&mut diagnostics);
    let valid = !diagnostics.iter().any(Diagnostic::is_error);
    Checked {
        deployment: deployment.filter(|_| valid),
        diagnostics: capped(diagnostics),
    }
}

/// Most diagnostics kept for one document: thousands of messages help nobody, and rendering
/// each one costs a scan of the source.
pub const DIAGNOSTICS_MAX: usize = 200;

/// The first [`DIAGNOSTICS_MAX`], then one saying how many more there were (an error if any of
/// them was, so that the kept list still tells whether the document is valid).
fn capped(mut diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    if diagnostics.len() <= DIAGNOSTICS_MAX {
        return diagnostics;
    }
    let dropped = diagnostics.split_off(DIAGNOSTICS_MAX);
    let first = &dropped[0];
    let at = diagnostic::Span {
        line: first.line,
        column: first.column,
        index: 0,
        length: first.length,
    };
    let message = format!("{} more problems from here on are not shown", dropped.len());
    let note = if dropped.iter().any(Diagnostic::is_error) {
        Diagnostic::error("too-many-diagnostics", at, message)
    } else {
        Diagnostic::warning("too-many-diagnostics", at, message)
    };
    diagnostics.push(note.with_hint("fix the problems above, then check again"));
    diagnostics
}

const DOCUMENT_FIELDS: &[&str] = &["name", "tenant", "channels", "flows"];

/// Deployment, tenant, channel and flow names: they appear in URLs, metrics and commands.
const LOWERCASE_NAME: NameRule = NameRule {
    first: |c| c.is_ascii_lowercase() || c.is_ascii_digit(),
    rest: |c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-',
    max_chars: 63,
    hint: "use 1 to 63 lowercase letters, digits and dashes, starting with a letter or a digit, such as `payments`",
};

/// Whether `name` may name a tenant: the rule of a document's `tenant:`, which API tokens'
/// tenants follow too, so that every tenant a token acts for could also be named in a document.
pub fn is_tenant_name(name: &str) -> bool {
    LOWERCASE_NAME.allows(name)
}

/// How a valid tenant name looks, for messages refusing one.
pub const TENANT_NAME_HINT: &str = LOWERCASE_NAME.hint;

/// Whether `name` may name a task topic: a poll for any other topic could never be answered.
pub fn is_task_topic(name: &str) -> bool {
    nodes::TOPIC_NAME.allows(name)
}

/// How a valid task topic looks, for messages refusing one.
pub const TASK_TOPIC_HINT: &str = nodes::TOPIC_NAME.hint;

fn document(cx: &mut Checker, root: &yaml::Node) -> Option<Deployment> {
    let record = cx.record(root, "the document".into(), root.span, "name: payments")?;
    cx.unknown_fields(&record, DOCUMENT_FIELDS);
    let name = cx
        .required(
            &record,
            "name",
            "start the document with `name: <deployment name>`",
        )
        .and_then(|node| cx.named(node, &record.label("name"), &LOWERCASE_NAME));
    let tenant = record
        .get("tenant")
        .and_then(|node| cx.named(node, &record.label("tenant"), &LOWERCASE_NAME));
    let channels = match record.get("channels") {
        Some(node) => Channels::read(cx, node, &record.label("channels")),
        None => Channels::default(),
    };
    let flows = cx
        .required(&record, "flows", "add `flows:` with at least one flow")
        .map(|node| flows::read(cx, node, &record.label("flows"), &channels));
    Some(Deployment {
        name: name?.to_owned(),
        tenant: tenant.map(str::to_owned),
        channels: channels.into_model(),
        flows: flows?,
    })
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_calls;
#[cfg(test)]
mod tests_schedule;
