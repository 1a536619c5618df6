//! A spanned YAML tree, built from the parser's event stream.
//!
//! Deployment documents come from users and, through `POST /v1/deployments`, from the network, so
//! the reader refuses what could hurt the process rather than what is merely unusual: anchors and
//! aliases (an alias bomb expands exponentially), documents over [`DOCUMENT_BYTES_MAX`], nesting
//! deeper than [`DEPTH_MAX`] (everything downstream may then recurse over the tree safely), and
//! duplicate keys (YAML leaves their meaning open; one of the two would silently win). Tags and
//! multi-document streams have no meaning in a deployment and are refused too. The tree is built
//! with an explicit stack, never by recursion, and a panic inside the parser is reported as a
//! syntax error instead of taking the caller down.
//!
//! Plain scalars are resolved with the YAML 1.2 core schema; quoted and block scalars are strings.

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, Tag};
use serde_json::Value as Json;

use crate::diagnostic::{Diagnostic, Span};

/// Largest document accepted, in bytes.
pub const DOCUMENT_BYTES_MAX: usize = 1 << 20;
/// Deepest nesting of lists and maps accepted.
pub const DEPTH_MAX: usize = 64;

#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub value: Value,
    /// A scalar's text (quotes included); the first char of a list or map.
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
    Seq(Vec<Node>),
    /// Keys are unique and kept in document order.
    Map(Vec<Entry>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub key: String,
    pub key_span: Span,
    pub value: Node,
}

impl Node {
    /// What the node is, for messages such as "expected text, found a list".
    pub fn describe(&self) -> &'static str {
        match self.value {
            Value::Null => "nothing (null)",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "a whole number",
            Value::Float(_) => "a number",
            Value::String(_) => "text",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a map",
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match &self.value {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_seq(&self) -> Option<&[Node]> {
        match &self.value {
            Value::Seq(items) => Some(items),
            _ => None,
        }
    }

    pub fn as_map(&self) -> Option<&[Entry]> {
        match &self.value {
            Value::Map(entries) => Some(entries),
            _ => None,
        }
    }

    /// The entry for `key`, when this node is a map that has it.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        self.as_map()?.iter().find(|entry| entry.key == key)
    }

    /// The node at a JSON pointer (`/properties/a/type`), as far as the path exists.
    pub fn at_pointer(&self, pointer: &str) -> &Node {
        let mut node = self;
        for token in pointer.split('/').skip(1) {
            let token = token.replace("~1", "/").replace("~0", "~");
            let child = match &node.value {
                Value::Map(entries) => entries
                    .iter()
                    .find(|entry| entry.key == token)
                    .map(|entry| &entry.value),
                Value::Seq(items) => token.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            };
            match child {
                Some(child) => node = child,
                None => break,
            }
        }
        node
    }

    /// The node as JSON. JSON has no NaN or infinity: the error is where such a number is.
    pub fn to_json(&self) -> Result<Json, Span> {
        Ok(match &self.value {
            Value::Null => Json::Null,
            Value::Bool(b) => Json::Bool(*b),
            Value::Int(i) => Json::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(Json::Number)
                .ok_or(self.span)?,
            Value::String(s) => Json::String(s.clone()),
            Value::Seq(items) => {
                Json::Array(items.iter().map(Node::to_json).collect::<Result<_, _>>()?)
            }
            Value::Map(entries) => Json::Object(
                entries
                    .iter()
                    .map(|entry| Ok((entry.key.clone(), entry.value.to_json()?)))
                    .collect::<Result<_, Span>>()?,
            ),
        })
    }
}

/// Parses one YAML document into a spanned tree.
pub fn parse(text: &str) -> Result<Node, Diagnostic> {
    if text.len() > DOCUMENT_BYTES_MAX {
        return Err(Diagnostic::error(
            "document-too-large",
            start_of_text(),
            format!(
                "the document is {} bytes; the limit is {DOCUMENT_BYTES_MAX} bytes (1 MiB)",
                text.len()
            ),
        )
        .with_hint("split the deployment into several smaller deployments"));
    }
    catch_unwind(AssertUnwindSafe(|| build(text))).unwrap_or_else(|_| {
        Err(Diagnostic::error(
            "yaml-syntax",
            start_of_text(),
            "the YAML parser failed on this document",
        ))
    })
}

fn start_of_text() -> Span {
    Span {
        line: 1,
        column: 1,
        index: 0,
        length: 0,
    }
}

fn span_of(span: saphyr_parser::Span) -> Span {
    Span {
        line: span.start.line(),
        column: span.start.col() + 1,
        index: span.start.index(),
        length: span.end.index().saturating_sub(span.start.index()),
    }
}

fn point(marker: &Marker) -> Span {
    Span {
        line: marker.line(),
        column: marker.col() + 1,
        index: marker.index(),
        length: 1,
    }
}

/// A list or map whose end event has not come yet.
enum Open {
    Seq {
        span: Span,
        items: Vec<Node>,
    },
    Map {
        span: Span,
        entries: Vec<Entry>,
        /// Where each key was first seen, to refuse duplicates in constant time.
        seen: HashMap<String, Span>,
        /// A key whose value has not come yet.
        key: Option<(String, Span)>,
    },
}

#[derive(Default)]
struct Builder {
    open: Vec<Open>,
    root: Option<Node>,
    documents: usize,
}

fn build(text: &str) -> Result<Node, Diagnostic> {
    let mut builder = Builder::default();
    for event in Parser::new_from_str(text) {
        let (event, span) =
            event.map_err(|e| syntax_error(text, &e, builder.innermost_bracket(text)))?;
        builder.accept(event, span_of(span))?;
    }
    builder.root.ok_or_else(|| {
        Diagnostic::error("empty-document", start_of_text(), "the document is empty")
            .with_hint("a deployment starts with `name:`, then `channels:` and `flows:`")
    })
}

impl Builder {
    fn accept(&mut self, event: Event<'_>, span: Span) -> Result<(), Diagnostic> {
        match event {
            Event::DocumentStart(_) => {
                self.documents += 1;
                if self.documents > 1 {
                    return Err(Diagnostic::error(
                        "multiple-documents",
                        span,
                        "a second YAML document starts here; a deployment file holds exactly one",
                    )
                    .with_hint("put each deployment in its own file, or remove the `---`"));
                }
            }
            Event::Alias(_) => return Err(anchor_error(span)),
            Event::Scalar(text, style, anchor, tag) => {
                refuse_anchor(anchor, span)?;
                refuse_tag(tag.as_deref(), span)?;
                refuse_nul(&text, span)?;
                if self.awaits_key() {
                    return self.key(text.into_owned(), span);
                }
                let value = scalar(text.into_owned(), style);
                self.value(Node { value, span });
            }
            Event::SequenceStart(anchor, tag) => {
                let open = Open::Seq {
                    span: Span { length: 1, ..span },
                    items: Vec::new(),
                };
                self.open(anchor, tag.as_deref(), span, open)?;
            }
            Event::MappingStart(anchor, tag) => {
                let open = Open::Map {
                    span: Span { length: 1, ..span },
                    entries: Vec::new(),
                    seen: HashMap::new(),
                    key: None,
                };
                self.open(anchor, tag.as_deref(), span, open)?;
            }
            Event::SequenceEnd | Event::MappingEnd => {
                let node = match self.open.pop() {
                    Some(Open::Seq { span, items }) => Node {
                        value: Value::Seq(items),
                        span,
                    },
                    Some(Open::Map { span, entries, .. }) => Node {
                        value: Value::Map(entries),
                        span,
                    },
                    None => return Ok(()),
                };
                self.value(node);
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
        Ok(())
    }

    fn open(
        &mut self,
        anchor: usize,
        tag: Option<&Tag>,
        span: Span,
        open: Open,
    ) -> Result<(), Diagnostic> {
        refuse_anchor(anchor, span)?;
        refuse_tag(tag, span)?;
        if self.awaits_key() {
            return Err(Diagnostic::error(
                "unsupported-yaml",
                span,
                "a list or a map cannot be used as a map key",
            )
            .with_hint("map keys are plain text, such as `name:`"));
        }
        if self.open.len() >= DEPTH_MAX {
            return Err(Diagnostic::error(
                "nesting-too-deep",
                span,
                format!("the document nests lists and maps more than {DEPTH_MAX} deep"),
            )
            .with_hint("flatten the structure"));
        }
        self.open.push(open);
        Ok(())
    }

    /// The `{` or `[` of the innermost open collection, when it is a flow collection.
    fn innermost_bracket(&self, text: &str) -> Option<(char, Span)> {
        let span = match self.open.last()? {
            Open::Seq { span, .. } | Open::Map { span, .. } => *span,
        };
        let bracket = text
            .chars()
            .nth(span.index)
            .filter(|c| matches!(c, '{' | '['))?;
        Some((bracket, span))
    }

    fn awaits_key(&self) -> bool {
        matches!(self.open.last(), Some(Open::Map { key: None, .. }))
    }

    fn key(&mut self, key: String, span: Span) -> Result<(), Diagnostic> {
        if let Some(Open::Map {
            seen, key: pending, ..
        }) = self.open.last_mut()
        {
            if let Some(first) = seen.get(&key) {
                return Err(Diagnostic::error(
                    "duplicate-key",
                    span,
                    format!("duplicate key `{key}`"),
                )
                .with_hint(format!(
                    "`{key}` is already set on line {}; remove one of the two",
                    first.line
                )));
            }
            seen.insert(key.clone(), span);
            *pending = Some((key, span));
        }
        Ok(())
    }

    fn value(&mut self, node: Node) {
        match self.open.last_mut() {
            None => self.root = Some(node),
            Some(Open::Seq { items, .. }) => items.push(node),
            Some(Open::Map { entries, key, .. }) => {
                if let Some((key, key_span)) = key.take() {
                    entries.push(Entry {
                        key,
                        key_span,
                        value: node,
                    });
                }
            }
        }
    }
}

fn anchor_error(span: Span) -> Diagnostic {
    Diagnostic::error(
        "unsupported-yaml",
        span,
        "YAML anchors and aliases (`&name`, `*name`) are not supported",
    )
    .with_hint("write the repeated value out in full")
}

fn refuse_anchor(anchor: usize, span: Span) -> Result<(), Diagnostic> {
    // The parser numbers anchors from 1; 0 means none.
    if anchor == 0 {
        Ok(())
    } else {
        Err(anchor_error(span))
    }
}

/// Tags are refused: custom ones name types this reader cannot build, and quoting does what the
/// only useful core one (`!!str`) would.
/// A scalar holding NUL (a `"\0"` or `"\u0000"` escape): PostgreSQL text cannot hold the
/// character, so no value, key or expression may carry it into an instance.
fn refuse_nul(text: &str, span: Span) -> Result<(), Diagnostic> {
    if !text.contains('\0') {
        return Ok(());
    }
    Err(Diagnostic::error(
        "nul-character",
        span,
        "this value holds the character \\u0000 (NUL), which cannot be stored",
    )
    .with_hint("remove the `\\0` or `\\u0000` escape"))
}

fn refuse_tag(tag: Option<&Tag>, span: Span) -> Result<(), Diagnostic> {
    let Some(tag) = tag else {
        return Ok(());
    };
    let name = match tag.handle.as_str() {
        "tag:yaml.org,2002:" => format!("!!{}", tag.suffix),
        handle => format!("{handle}{}", tag.suffix),
    };
    Err(Diagnostic::error(
        "unsupported-yaml",
        span,
        format!("YAML tag `{name}` is not supported"),
    )
    .with_hint("remove the tag; to make a value text, quote it"))
}

fn scalar(text: String, style: ScalarStyle) -> Value {
    if style == ScalarStyle::Plain {
        resolve_plain(text)
    } else {
        Value::String(text)
    }
}

/// The YAML 1.2 core schema's reading of a plain scalar.
fn resolve_plain(text: String) -> Value {
    match text.as_str() {
        "" | "~" | "null" | "Null" | "NULL" => Value::Null,
        "true" | "True" | "TRUE" => Value::Bool(true),
        "false" | "False" | "FALSE" => Value::Bool(false),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Value::Float(f64::INFINITY),
        "-.inf" | "-.Inf" | "-.INF" => Value::Float(f64::NEG_INFINITY),
        ".nan" | ".NaN" | ".NAN" => Value::Float(f64::NAN),
        other => match core_int(other) {
            Some(i) => Value::Int(i),
            None if is_core_float(other) => other
                .parse()
                .map(Value::Float)
                .unwrap_or(Value::String(text)),
            None => Value::String(text),
        },
    }
}

fn core_int(text: &str) -> Option<i64> {
    if let Some(octal) = text.strip_prefix("0o") {
        return i64::from_str_radix(octal, 8).ok();
    }
    if let Some(hex) = text.strip_prefix("0x") {
        return i64::from_str_radix(hex, 16).ok();
    }
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Too large for i64: it is still a number, and reads as a float.
    text.parse().ok()
}

/// `[-+]? ( \. [0-9]+ | [0-9]+ ( \. [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?`
fn is_core_float(text: &str) -> bool {
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((mantissa, exponent)) => (mantissa, Some(exponent)),
        None => (unsigned, None),
    };
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match mantissa.split_once('.') {
        Some((whole, fraction)) => {
            digits(whole) && digits(fraction) && !(whole.is_empty() && fraction.is_empty())
        }
        None => !mantissa.is_empty() && digits(mantissa),
    };
    let exponent_ok = exponent.is_none_or(|e| {
        let e = e.strip_prefix(['-', '+']).unwrap_or(e);
        !e.is_empty() && digits(e)
    });
    mantissa_ok && exponent_ok
}

/// A located syntax error. The parser's position for a stray tab is often a line early, and its
/// wording does not say what to do, so a tab in the indentation nearby is pointed at directly;
/// an unclosed `{` or `[` is reported where the parser gave up, so the hint says where it opened.
fn syntax_error(
    text: &str,
    error: &saphyr_parser::ScanError,
    bracket: Option<(char, Span)>,
) -> Diagnostic {
    let at = point(error.marker());
    if let Some(tab) = indentation_tab_near(text, at.line) {
        return Diagnostic::error("yaml-syntax", tab, "tab character in indentation")
            .with_hint("YAML indents with spaces only; replace the tab with spaces");
    }
    let hint = match bracket {
        Some((open, opened)) if error.info().contains("flow") => format!(
            "the `{open}` on line {}, column {} is not closed: close it with `{}`, or separate its entries with `,`",
            opened.line,
            opened.column,
            if open == '{' { '}' } else { ']' },
        ),
        _ => "check the indentation, and the brackets and quotes, around this point".to_owned(),
    };
    Diagnostic::error("yaml-syntax", at, format!("invalid YAML: {}", error.info())).with_hint(hint)
}

fn indentation_tab_near(text: &str, line: usize) -> Option<Span> {
    let first = line.saturating_sub(1);
    text.lines()
        .enumerate()
        .skip(first)
        .take(2)
        .find_map(|(number, content)| {
            let indentation = content.len() - content.trim_start_matches([' ', '\t']).len();
            let column = content[..indentation].find('\t')?;
            Some(Span {
                line: number + 1,
                column: column + 1,
                index: 0,
                length: 1,
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str) -> Value {
        parse(text).unwrap().value
    }

    fn error(text: &str) -> Diagnostic {
        parse(text).unwrap_err()
    }

    #[test]
    fn resolves_plain_scalars_with_the_core_schema() {
        let Value::Seq(items) = value(
            "[~, null, '', true, False, 12, -3, 0x1F, 0o17, 1.5, .5, 1e3, .inf, yes, '12', 1.2.3]",
        ) else {
            panic!("not a list");
        };
        let values: Vec<Value> = items.into_iter().map(|n| n.value).collect();
        assert_eq!(
            values[..14],
            [
                Value::Null,
                Value::Null,
                Value::String(String::new()),
                Value::Bool(true),
                Value::Bool(false),
                Value::Int(12),
                Value::Int(-3),
                Value::Int(31),
                Value::Int(15),
                Value::Float(1.5),
                Value::Float(0.5),
                Value::Float(1000.0),
                Value::Float(f64::INFINITY),
                Value::String("yes".into()),
            ]
        );
        assert_eq!(values[14], Value::String("12".into()));
        assert_eq!(values[15], Value::String("1.2.3".into()));
    }

    #[test]
    fn keeps_keys_in_order_with_their_spans() {
        let root = parse("b: 1\na:\n  c: x\n").unwrap();
        let entries = root.as_map().unwrap();
        assert_eq!(entries[0].key, "b");
        assert_eq!(entries[1].key, "a");
        assert_eq!(
            (entries[1].key_span.line, entries[1].key_span.column),
            (2, 1)
        );
        let inner = root.entry("a").unwrap().value.entry("c").unwrap();
        assert_eq!((inner.value.span.line, inner.value.span.column), (3, 6));
    }

    #[test]
    fn refuses_what_could_hurt_the_process() {
        assert_eq!(error("a: &x [1]\nb: *x\n").rule, "unsupported-yaml");
        assert_eq!(error("a: !custom 1\n").rule, "unsupported-yaml");
        assert_eq!(error("a: 1\n---\nb: 2\n").rule, "multiple-documents");
        assert_eq!(error("a: 1\nb: 2\na: 3\n").rule, "duplicate-key");
        let deep = "[".repeat(DEPTH_MAX + 1) + &"]".repeat(DEPTH_MAX + 1);
        assert_eq!(error(&deep).rule, "nesting-too-deep");
        let large = "#".repeat(DOCUMENT_BYTES_MAX + 1);
        assert_eq!(error(&large).rule, "document-too-large");
        assert_eq!(error("").rule, "empty-document");
        assert_eq!(error("a: !!str 12\n").rule, "unsupported-yaml");
    }

    #[test]
    fn points_at_a_tab_in_the_indentation() {
        let diagnostic = error("a:\n  b: 1\n\tc: 2\n");
        assert_eq!((diagnostic.line, diagnostic.column), (3, 1));
        assert_eq!(diagnostic.message, "tab character in indentation");
    }

    #[test]
    fn syntax_errors_are_located() {
        let diagnostic = error("a: [1, 2\nb: 3\n");
        assert_eq!(diagnostic.rule, "yaml-syntax");
        assert!(diagnostic.line >= 1);
    }

    #[test]
    fn json_refuses_nan() {
        let root = parse("a: [1, .nan]").unwrap();
        let at = root.to_json().unwrap_err();
        assert_eq!((at.line, at.column), (1, 8));
        let ok = parse("a: {b: [1, 'x', null]}").unwrap().to_json().unwrap();
        assert_eq!(ok, serde_json::json!({"a": {"b": [1, "x", null]}}));
    }
}
