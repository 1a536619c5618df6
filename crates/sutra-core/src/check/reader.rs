//! Typed reading of the YAML tree: every helper either returns the value or reports why not.
//!
//! Invariant the checker relies on: a helper that returns `None` for a present value has reported
//! an error, so a `None` never silently stands in for a mistake.

use std::cell::OnceCell;

use jiff::SignedDuration;
use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Span, did_you_mean};
use crate::duration::parse_duration;
use crate::expr::{CompileError, Expr, Leaf, Template, classify_leaf};
use crate::yaml::{Entry, Node, Value};

use super::calls::Reference;

/// The shortest period anything may repeat at: a schedule's `every`, a reminder's. An engine may
/// hold reminders to a longer one at deploy (`sutra.remind.min-every`), never to a shorter.
pub const PERIOD_MIN: SignedDuration = SignedDuration::from_secs(1);

/// Collects diagnostics while the document is read.
pub(super) struct Checker<'s> {
    source: &'s str,
    /// The byte offset of each char of `source`, built on the first need: spans count chars,
    /// and finding one by scanning from the start for every diagnostic would be quadratic.
    char_offsets: OnceCell<Vec<usize>>,
    pub diagnostics: Vec<Diagnostic>,
    /// The names under which the `for-each` bodies of the flow being read see their item and
    /// its position: an expression elsewhere that uses one is told why it cannot.
    pub loop_names: Vec<String>,
    /// The calls read so far, resolved once every flow's name is known.
    pub calls: Vec<Reference>,
}

/// A YAML map read as a set of named fields.
pub(super) struct Record<'a> {
    pub entries: &'a [Entry],
    /// How messages name it: "channel `ledger`", "the `task` of node `debit`".
    pub what: String,
    /// Where a missing field is reported: usually the key that introduces the map.
    pub at: Span,
}

impl<'a> Record<'a> {
    pub fn entry(&self, field: &str) -> Option<&'a Entry> {
        self.entries.iter().find(|entry| entry.key == field)
    }

    pub fn get(&self, field: &str) -> Option<&'a Node> {
        self.entry(field).map(|entry| &entry.value)
    }

    /// How messages name one of its fields: "`topic` in the `task` of node `debit`".
    pub fn label(&self, field: &str) -> String {
        format!("`{field}` in {}", self.what)
    }
}

/// A naming rule: deployment and channel names, node ids, variables.
pub(super) struct NameRule {
    pub first: fn(char) -> bool,
    pub rest: fn(char) -> bool,
    pub max_chars: usize,
    pub hint: &'static str,
}

impl NameRule {
    pub fn allows(&self, name: &str) -> bool {
        let mut chars = name.chars();
        chars.next().is_some_and(self.first)
            && chars.all(self.rest)
            && name.chars().count() <= self.max_chars
    }
}

/// Whether a duration of zero means something for the field being read.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Zero {
    Allowed,
    Refused,
}

/// Whether an expression stands alone (`when:`) or is a `=` leaf of a template.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Written {
    Bare,
    InTemplate,
}

/// Quotes names for messages: "`a`, `b` and `c`" (or "`a`, `b` or `c`").
pub(super) fn listing<'n>(names: impl IntoIterator<Item = &'n str>, conjunction: &str) -> String {
    let names: Vec<String> = names.into_iter().map(|n| format!("`{n}`")).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} {conjunction} {last}", rest.join(", ")),
    }
}

/// "did you mean `x`?" when one candidate is close, else the full list.
pub(super) fn suggestion(word: &str, candidates: &[&str], intro: &str) -> String {
    match did_you_mean(word, candidates.iter().copied()) {
        Some(close) => format!("did you mean `{close}`?"),
        None => format!("{intro} {}", listing(candidates.iter().copied(), "and")),
    }
}

impl<'s> Checker<'s> {
    pub fn new(source: &'s str) -> Checker<'s> {
        Checker {
            source,
            char_offsets: OnceCell::new(),
            diagnostics: Vec::new(),
            loop_names: Vec::new(),
            calls: Vec::new(),
        }
    }

    pub fn report(&mut self, diagnostic: Diagnostic) {
        self.diagnostics.push(diagnostic);
    }

    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    fn wrong_type(&mut self, node: &Node, label: &str, expected: &str, hint: Option<&str>) {
        let diagnostic = Diagnostic::error(
            "wrong-type",
            node.span,
            format!("{label} must be {expected}, not {}", node.describe()),
        );
        self.report(match hint {
            Some(hint) => diagnostic.with_hint(hint),
            None => diagnostic,
        });
    }

    /// The node as a map; `example` shows the expected shape in the hint.
    pub fn map<'a>(&mut self, node: &'a Node, label: &str, example: &str) -> Option<&'a [Entry]> {
        let entries = node.as_map();
        if entries.is_none() {
            let hint = format!("write it as `{example}`");
            self.wrong_type(node, label, "a map", Some(&hint));
        }
        entries
    }

    pub fn list<'a>(&mut self, node: &'a Node, label: &str, example: &str) -> Option<&'a [Node]> {
        let items = node.as_seq();
        if items.is_none() {
            let hint = format!("write it as a list: `{example}`");
            self.wrong_type(node, label, "a list", Some(&hint));
        }
        items
    }

    pub fn record<'a>(
        &mut self,
        node: &'a Node,
        what: String,
        at: Span,
        example: &str,
    ) -> Option<Record<'a>> {
        let entries = self.map(node, &what, example)?;
        Some(Record { entries, what, at })
    }

    /// Reports every field of `record` that is not in `known`.
    pub fn unknown_fields(&mut self, record: &Record, known: &[&str]) {
        for entry in record.entries {
            if !known.contains(&entry.key.as_str()) {
                self.report(
                    Diagnostic::error(
                        "unknown-field",
                        entry.key_span,
                        format!("unknown field `{}` in {}", entry.key, record.what),
                    )
                    .with_hint(suggestion(
                        &entry.key,
                        known,
                        "the fields here are",
                    )),
                );
            }
        }
    }

    pub fn required<'a>(
        &mut self,
        record: &Record<'a>,
        field: &str,
        hint: &str,
    ) -> Option<&'a Node> {
        let node = record.get(field);
        if node.is_none() {
            self.report(
                Diagnostic::error(
                    "missing-field",
                    record.at,
                    format!("{} has no `{field}`", record.what),
                )
                .with_hint(hint),
            );
        }
        node
    }

    /// Non-empty text.
    pub fn text<'a>(&mut self, node: &'a Node, label: &str) -> Option<&'a str> {
        let text = self.any_text(node, label)?;
        if text.trim().is_empty() {
            self.report(Diagnostic::error(
                "invalid-value",
                node.span,
                format!("{label} is empty"),
            ));
            return None;
        }
        Some(text)
    }

    /// Text that may be empty, for the fields where `""` is a value (AMQP's default exchange).
    pub fn any_text<'a>(&mut self, node: &'a Node, label: &str) -> Option<&'a str> {
        let text = node.as_str();
        if text.is_none() {
            self.wrong_type(node, label, "text", None);
        }
        text
    }

    pub fn flag(&mut self, node: &Node, label: &str) -> Option<bool> {
        match node.value {
            Value::Bool(flag) => Some(flag),
            _ => {
                self.wrong_type(node, label, "`true` or `false`", None);
                None
            }
        }
    }

    /// A whole number from `min` up.
    pub fn count(&mut self, node: &Node, label: &str, min: u32) -> Option<u32> {
        let Value::Int(n) = node.value else {
            self.wrong_type(node, label, "a whole number", None);
            return None;
        };
        let count = u32::try_from(n).ok().filter(|&count| count >= min);
        if count.is_none() {
            let bound = if n < i64::from(min) {
                format!("{min} or more")
            } else {
                format!("at most {}", u32::MAX)
            };
            self.report(Diagnostic::error(
                "invalid-value",
                node.span,
                format!("{label} must be {bound}, not {n}"),
            ));
        }
        count
    }

    /// One of a fixed set of words.
    pub fn keyword<T: Copy>(
        &mut self,
        node: &Node,
        label: &str,
        options: &[(&'static str, T)],
    ) -> Option<T> {
        let words: Vec<&str> = options.iter().map(|(word, _)| *word).collect();
        let given = node.as_str();
        if let Some(&(_, value)) = options.iter().find(|(word, _)| Some(*word) == given) {
            return Some(value);
        }
        let found = given.map_or_else(|| node.describe().to_owned(), |text| format!("`{text}`"));
        let diagnostic = Diagnostic::error(
            "invalid-value",
            node.span,
            format!(
                "{label} must be {}, not {found}",
                listing(words.iter().copied(), "or")
            ),
        );
        self.report(
            match given.and_then(|text| did_you_mean(text, words.iter().copied())) {
                Some(close) => diagnostic.with_hint(format!("did you mean `{close}`?")),
                None => diagnostic,
            },
        );
        None
    }

    pub fn duration(&mut self, node: &Node, label: &str, zero: Zero) -> Option<SignedDuration> {
        const EXAMPLES: &str =
            "write an ISO-8601 duration such as PT30S (30 seconds), PT5M, PT1H30M or P1D";
        let Some(text) = node.as_str() else {
            let expected = "an ISO-8601 duration such as PT30S";
            self.wrong_type(node, label, expected, Some(EXAMPLES));
            return None;
        };
        let (message, hint) = match parse_duration(text) {
            Ok(duration) if zero == Zero::Allowed || !duration.is_zero() => return Some(duration),
            Ok(_) => (
                format!("{label} must be longer than zero"),
                "write a positive duration such as PT30S".to_owned(),
            ),
            Err(error) => (format!("{label}: {error}"), error.hint().to_owned()),
        };
        self.report(Diagnostic::error("invalid-duration", node.span, message).with_hint(hint));
        None
    }

    /// A period something repeats at (a schedule's `every`, a reminder's): a duration of at
    /// least one second, so that no document makes the engine a busy loop (a reminder every
    /// millisecond wrote ~670 history rows a second, issue 48). `hint` says why for this use.
    pub fn period(&mut self, node: &Node, label: &str, hint: &str) -> Option<SignedDuration> {
        let period = self.duration(node, label, Zero::Refused)?;
        if period < PERIOD_MIN {
            let written = node.as_str().unwrap_or_default().trim();
            self.report(
                Diagnostic::error(
                    "every-too-short",
                    node.span,
                    format!("{label} is `{written}`, shorter than one second"),
                )
                .with_hint(hint),
            );
            return None;
        }
        Some(period)
    }

    /// A name following `rule`, given as text.
    pub fn named<'a>(&mut self, node: &'a Node, label: &str, rule: &NameRule) -> Option<&'a str> {
        let text = self.text(node, label)?;
        self.name_ok(text, node.span, label, rule).then_some(text)
    }

    pub fn name_ok(&mut self, name: &str, at: Span, label: &str, rule: &NameRule) -> bool {
        let ok = rule.allows(name);
        if !ok {
            self.report(
                Diagnostic::error(
                    "invalid-name",
                    at,
                    format!("{label}: `{name}` is not a valid name"),
                )
                .with_hint(rule.hint),
            );
        }
        ok
    }

    /// The node as JSON: JSON has no NaN or infinity.
    pub fn json(&mut self, node: &Node, label: &str) -> Option<Json> {
        node.to_json()
            .map_err(|at| {
                self.report(
                    Diagnostic::error(
                        "invalid-value",
                        at,
                        format!("{label} holds a number that JSON cannot represent"),
                    )
                    .with_hint("NaN and infinity have no JSON form; use a string or null"),
                );
            })
            .ok()
    }

    /// A bare CEL expression. Booleans and integers are expressions too (`when: true`).
    pub fn expression(&mut self, node: &Node, label: &str, roots: &[&str]) -> Option<Expr> {
        let source = match &node.value {
            Value::String(text) => text.clone(),
            Value::Bool(flag) => flag.to_string(),
            Value::Int(n) => n.to_string(),
            _ => {
                self.wrong_type(node, label, "a CEL expression (text)", None);
                return None;
            }
        };
        self.compile(node, &source, label, roots, Written::Bare)
    }

    /// A template over the instance: string leaves starting with `=` are expressions.
    pub fn template(&mut self, node: &Node, label: &str, roots: &[&str]) -> Option<Template> {
        match &node.value {
            Value::String(text) => match classify_leaf(text) {
                Leaf::Literal(text) => Some(Template::Literal(Json::String(text))),
                Leaf::Expression(source) => self
                    .compile(node, source, label, roots, Written::InTemplate)
                    .map(Template::Expr),
            },
            Value::Seq(items) => {
                let items: Vec<Option<Template>> = items
                    .iter()
                    .map(|item| self.template(item, label, roots))
                    .collect();
                let items: Vec<Template> = items.into_iter().collect::<Option<_>>()?;
                Some(match literals(&items) {
                    Some(values) => Template::Literal(Json::Array(values)),
                    None => Template::List(items),
                })
            }
            Value::Map(entries) => {
                let values: Vec<Option<Template>> = entries
                    .iter()
                    .map(|entry| self.template(&entry.value, label, roots))
                    .collect();
                let values: Vec<Template> = values.into_iter().collect::<Option<_>>()?;
                Some(match literals(&values) {
                    Some(values) => Template::Literal(Json::Object(
                        entries.iter().map(|e| e.key.clone()).zip(values).collect(),
                    )),
                    None => {
                        Template::Map(entries.iter().map(|e| e.key.clone()).zip(values).collect())
                    }
                })
            }
            _ => self.json(node, label).map(Template::Literal),
        }
    }

    fn compile(
        &mut self,
        node: &Node,
        source: &str,
        label: &str,
        roots: &[&str],
        written: Written,
    ) -> Option<Expr> {
        Expr::compile(source, roots)
            .map_err(|error| {
                let diagnostic =
                    self.expression_error(node, source.trim(), label, roots, written, &error);
                self.report(diagnostic);
            })
            .ok()
    }

    fn expression_error(
        &self,
        node: &Node,
        source: &str,
        label: &str,
        roots: &[&str],
        written: Written,
        error: &CompileError,
    ) -> Diagnostic {
        let message = |reason: &str| format!("invalid expression in {label}: {reason}");
        let example = if roots.contains(&"vars") {
            "write a CEL expression, such as `vars.input.amount > 10000`"
        } else {
            "write a CEL expression over the message, such as `data.transferId`"
        };
        match error {
            CompileError::UnknownName { name, .. } => {
                let at = find_word(source, name).map_or(node.span, |offset| {
                    self.within(node.span, source, offset, name.chars().count())
                });
                let allowed = format!(
                    "expressions here can use {}",
                    listing(roots.iter().copied(), "and")
                );
                Diagnostic::error(
                    "invalid-expression",
                    at,
                    message(&format!("unknown name `{name}`")),
                )
                .with_hint(match did_you_mean(name, roots.iter().copied()) {
                    _ if self.loop_names.contains(name) => format!(
                        "`{name}` is only visible inside the body of a `for-each`; {allowed}"
                    ),
                    Some(close) => format!("did you mean `{close}`? {allowed}"),
                    None => allowed,
                })
            }
            CompileError::Syntax(_) => {
                let detail = error.syntax_detail();
                let at = detail
                    .as_ref()
                    .filter(|detail| detail.line == 1)
                    .map_or(node.span, |detail| {
                        self.within(node.span, source, detail.column - 1, 1)
                    });
                let reason = detail.map_or_else(|| error.to_string(), |detail| detail.reason);
                let hint = match written {
                    Written::Bare if source.starts_with('=') => {
                        "this field is an expression already: remove the leading `=`"
                    }
                    Written::Bare => example,
                    Written::InTemplate => {
                        "text starting with `=` is a CEL expression; start it with `==` for text that begins with `=`"
                    }
                };
                Diagnostic::error("invalid-expression", at, message(&reason)).with_hint(hint)
            }
            CompileError::Empty => {
                let hint = match written {
                    Written::Bare => example,
                    Written::InTemplate => {
                        "write an expression after the `=`, or start with `==` for text that begins with `=`"
                    }
                };
                Diagnostic::error(
                    "invalid-expression",
                    node.span,
                    message("the expression is empty"),
                )
                .with_hint(hint)
            }
            CompileError::TooLong(_) | CompileError::TooDeep | CompileError::LoopsTooDeep => {
                Diagnostic::error("invalid-expression", node.span, message(&error.to_string()))
                    .with_hint("split the computation across several `set` nodes")
            }
        }
    }

    /// The source text of a span.
    fn text_at(&self, span: Span) -> &str {
        let offsets = self.char_offsets.get_or_init(|| {
            let mut offsets: Vec<usize> = self.source.char_indices().map(|(at, _)| at).collect();
            offsets.push(self.source.len());
            offsets
        });
        let byte = |index: usize| offsets[index.min(offsets.len() - 1)];
        &self.source[byte(span.index)..byte(span.index + span.length)]
    }

    /// The part of a scalar that is `length` chars at `offset` into `needle`, a piece of the
    /// scalar's value. Falls back to the whole scalar when the value is not written verbatim on
    /// one line of the source (escapes, folded text).
    pub(super) fn within(&self, scalar: Span, needle: &str, offset: usize, length: usize) -> Span {
        let text = self.text_at(scalar);
        match text.find(needle) {
            Some(at) if !text[..at].contains('\n') && !needle.contains('\n') => {
                let before = text[..at].chars().count() + offset;
                Span {
                    line: scalar.line,
                    column: scalar.column + before,
                    index: scalar.index + before,
                    length,
                }
            }
            _ => scalar,
        }
    }
}

/// The values of the templates when every one of them is a literal.
fn literals(templates: &[Template]) -> Option<Vec<Json>> {
    templates
        .iter()
        .map(|template| match template {
            Template::Literal(value) => Some(value.clone()),
            _ => None,
        })
        .collect()
}

/// The char offset of `word` as a whole identifier in `text`.
fn find_word(text: &str, word: &str) -> Option<usize> {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    text.match_indices(word)
        .find(|&(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + word.len()..].chars().next();
            !before.is_some_and(is_ident) && !after.is_some_and(is_ident)
        })
        .map(|(at, _)| text[..at].chars().count())
}
