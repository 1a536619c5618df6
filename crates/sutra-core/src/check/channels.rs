//! Channels: their fields, their JSON Schemas, and the checks that flows make against them.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::diagnostic::{Diagnostic, Span};
use crate::expr::MESSAGE_ROOTS;
use crate::model::{ACK_TIMEOUT_DEFAULT, Ack, Channel, Schema, Transport, UNACKED_DEFAULT};
use crate::yaml::{Entry, Node};

use super::LOWERCASE_NAME;
use super::reader::{Checker, Record, Zero, listing, suggestion};

const CHANNEL_FIELDS: &[&str] = &[
    "transport",
    "schema",
    "correlate",
    "ack",
    "ack-timeout",
    "queue",
    "exchange",
    "routing-key",
    "prefetch",
    "subject",
    "stream",
    "consumer",
    "max-ack-pending",
    "create-consumer",
    "url",
    "singleton",
    "max-attempts",
    "buffer",
];

const TRANSPORTS: &[(&str, Transport)] = &[
    ("http", Transport::Http),
    ("amqp", Transport::Amqp),
    ("nats", Transport::Nats),
];

const ACKS: &[(&str, Ack)] = &[("commit", Ack::Commit), ("complete", Ack::Complete)];

/// Fields that only mean something on some transports.
const TRANSPORT_FIELDS: &[(&str, &[Transport], &str)] = &[
    ("queue", &[Transport::Amqp], "amqp channels"),
    ("exchange", &[Transport::Amqp], "amqp channels"),
    ("routing-key", &[Transport::Amqp], "amqp channels"),
    ("prefetch", &[Transport::Amqp], "amqp channels"),
    ("subject", &[Transport::Nats], "nats channels"),
    ("stream", &[Transport::Nats], "nats channels"),
    ("consumer", &[Transport::Nats], "nats channels"),
    ("max-ack-pending", &[Transport::Nats], "nats channels"),
    ("create-consumer", &[Transport::Nats], "nats channels"),
    ("url", &[Transport::Http], "http channels"),
    (
        "singleton",
        &[Transport::Amqp, Transport::Nats],
        "amqp and nats channels (an http channel is not consumed)",
    ),
];

/// What a flow needs to know about a declared channel, known even when the channel itself has
/// errors (so that a mistake in a channel is not reported again at every use of it).
pub(super) struct Declared {
    transport: Option<Transport>,
    correlates: bool,
    has_url: bool,
    /// Whether it names where a broker's messages are read: an amqp `queue`, a nats `stream`.
    has_source: bool,
    line: usize,
    built: Option<Channel>,
}

/// The channels of the document.
#[derive(Default)]
pub(super) struct Channels {
    declared: BTreeMap<String, Declared>,
}

impl Channels {
    pub fn read(cx: &mut Checker, node: &Node, label: &str) -> Channels {
        let example = "channels: { orders: { transport: http } }";
        let Some(entries) = cx.map(node, label, example) else {
            return Channels::default();
        };
        let declared = entries
            .iter()
            .map(|entry| {
                let label = format!("channel name `{}`", entry.key);
                cx.name_ok(&entry.key, entry.key_span, &label, &LOWERCASE_NAME);
                (entry.key.clone(), declare(cx, entry))
            })
            .collect();
        Channels { declared }
    }

    pub fn into_model(self) -> BTreeMap<String, Channel> {
        self.declared
            .into_iter()
            .filter_map(|(name, declared)| Some((name, declared.built?)))
            .collect()
    }

    /// The channel named by `node`, which must be declared.
    pub fn lookup<'c>(
        &'c self,
        cx: &mut Checker,
        node: &Node,
        label: &str,
    ) -> Option<(String, &'c Declared)> {
        let name = cx.text(node, label)?;
        if let Some(declared) = self.declared.get(name) {
            return Some((name.to_owned(), declared));
        }
        let names: Vec<&str> = self.declared.keys().map(String::as_str).collect();
        let hint = if names.is_empty() {
            "declare it under `channels:` at the top of the document".to_owned()
        } else {
            suggestion(
                name,
                &names,
                "declare it under `channels:`; the declared channels are",
            )
        };
        cx.report(
            Diagnostic::error(
                "undeclared-channel",
                node.span,
                format!("channel `{name}` is not declared"),
            )
            .with_hint(hint),
        );
        None
    }
}

impl Declared {
    /// A `receive` can only ever match if the channel computes a correlation key.
    pub fn check_receivable(&self, cx: &mut Checker, name: &str, at: Span, node: &str) {
        if !self.correlates {
            cx.report(
                Diagnostic::error(
                    "uncorrelated-receive",
                    at,
                    format!(
                        "{node} receives on channel `{name}`, which has no `correlate`, so no message can ever match"
                    ),
                )
                .with_hint(format!(
                    "add `correlate: data.<key field>` to channel `{name}` (line {})",
                    self.line
                )),
            );
        }
    }

    /// A channel messages come in by — a flow starts on it, or a `receive` waits on it — must say
    /// where a broker's consumer reads them.
    pub fn check_consumable(&self, cx: &mut Checker, name: &str, at: Span, what: &str) {
        let (key, hint) = match self.transport {
            _ if self.has_source => return,
            Some(Transport::Amqp) => ("queue", "the AMQP queue Sutra consumes"),
            Some(Transport::Nats) => ("stream", "the JetStream stream Sutra consumes"),
            Some(Transport::Http) | None => return,
        };
        cx.report(
            Diagnostic::error(
                "channel-not-consumable",
                at,
                format!(
                    "{what} takes messages from channel `{name}`, which names no `{key}` to read them from"
                ),
            )
            .with_hint(format!(
                "add `{key}:` with {hint} to channel `{name}` (line {})",
                self.line
            )),
        );
    }

    /// An `emit` over http needs somewhere to send.
    pub fn check_emittable(&self, cx: &mut Checker, name: &str, at: Span, node: &str) {
        if self.transport == Some(Transport::Http) && !self.has_url {
            cx.report(
                Diagnostic::error(
                    "emit-needs-url",
                    at,
                    format!("{node} emits to http channel `{name}`, which has no `url` to send to"),
                )
                .with_hint(format!(
                    "add `url: https://…` to channel `{name}` (line {})",
                    self.line
                )),
            );
        }
    }
}

fn declare(cx: &mut Checker, entry: &Entry) -> Declared {
    let record = cx.record(
        &entry.value,
        format!("channel `{}`", entry.key),
        entry.key_span,
        "{ transport: http }",
    );
    let transport = record
        .as_ref()
        .and_then(|record| record.get("transport"))
        .and_then(|node| node.as_str())
        .and_then(|text| TRANSPORTS.iter().find(|(word, _)| *word == text))
        .map(|&(_, transport)| transport);
    Declared {
        transport,
        correlates: record
            .as_ref()
            .is_some_and(|r| r.get("correlate").is_some()),
        has_url: record.as_ref().is_some_and(|r| r.get("url").is_some()),
        has_source: record.as_ref().is_some_and(|r| match transport {
            Some(Transport::Amqp) => r.get("queue").is_some(),
            Some(Transport::Nats) => r.get("stream").is_some(),
            Some(Transport::Http) | None => true,
        }),
        line: entry.key_span.line,
        built: record.and_then(|record| channel(cx, &entry.key, &record)),
    }
}

fn channel(cx: &mut Checker, name: &str, record: &Record) -> Option<Channel> {
    cx.unknown_fields(record, CHANNEL_FIELDS);
    let transport = cx
        .required(
            record,
            "transport",
            "add `transport: http` (or `amqp`, `nats`)",
        )
        .and_then(|node| cx.keyword(node, &record.label("transport"), TRANSPORTS));
    if let Some(transport) = transport {
        check_transport_fields(cx, record, transport);
    }
    let text = |cx: &mut Checker, field: &str| {
        record
            .get(field)
            .and_then(|node| cx.text(node, &record.label(field)))
            .map(str::to_owned)
    };
    let queue = text(cx, "queue");
    // `""` names AMQP's default exchange, which routes by queue name: a value, not an omission.
    let exchange = record
        .get("exchange")
        .and_then(|node| cx.any_text(node, &record.label("exchange")))
        .map(str::to_owned);
    let routing_key = text(cx, "routing-key");
    let subject = text(cx, "subject");
    let stream = text(cx, "stream");
    let consumer = text(cx, "consumer");
    let unacked = |cx: &mut Checker, field: &str| {
        record
            .get(field)
            .and_then(|node| cx.count(node, &record.label(field), 1))
            .unwrap_or(UNACKED_DEFAULT)
    };
    let prefetch = unacked(cx, "prefetch");
    let max_ack_pending = unacked(cx, "max-ack-pending");
    let url = text(cx, "url");
    if let (Some(url), Some(node)) = (&url, record.get("url")) {
        check_url(cx, url, node, &record.label("url"));
    }
    let schema = record
        .get("schema")
        .and_then(|node| schema(cx, node, &record.label("schema")));
    let correlate = record
        .get("correlate")
        .and_then(|node| cx.expression(node, &record.label("correlate"), MESSAGE_ROOTS));
    let ack = record
        .get("ack")
        .and_then(|node| cx.keyword(node, &record.label("ack"), ACKS));
    let ack_timeout = record
        .get("ack-timeout")
        .and_then(|node| cx.duration(node, &record.label("ack-timeout"), Zero::Refused));
    let flag = |cx: &mut Checker, field: &str| {
        record
            .get(field)
            .and_then(|node| cx.flag(node, &record.label(field)))
    };
    let singleton = flag(cx, "singleton");
    let create_consumer = flag(cx, "create-consumer");
    let max_attempts = record
        .get("max-attempts")
        .and_then(|node| cx.count(node, &record.label("max-attempts"), 1));
    let buffer = record
        .get("buffer")
        .and_then(|node| cx.duration(node, &record.label("buffer"), Zero::Refused));
    Some(Channel {
        name: name.to_owned(),
        transport: transport?,
        schema,
        correlate,
        ack: ack.unwrap_or(Ack::Commit),
        ack_timeout: ack_timeout.unwrap_or(ACK_TIMEOUT_DEFAULT),
        queue,
        exchange: exchange.unwrap_or_default(),
        routing_key,
        prefetch,
        subject,
        stream,
        consumer,
        max_ack_pending,
        create_consumer: create_consumer.unwrap_or(true),
        url,
        singleton: singleton.unwrap_or(false),
        max_attempts,
        buffer,
    })
}

/// Fields of another transport are mistakes; a broker channel needs its address.
fn check_transport_fields(cx: &mut Checker, record: &Record, transport: Transport) {
    for &(field, transports, applies_to) in TRANSPORT_FIELDS {
        if let Some(entry) = record
            .entry(field)
            .filter(|_| !transports.contains(&transport))
        {
            cx.report(
                Diagnostic::error(
                    "misplaced-field",
                    entry.key_span,
                    format!(
                        "`{field}` only applies to {applies_to}, and {} is {}",
                        record.what,
                        transport.name()
                    ),
                )
                .with_hint(format!("remove `{field}`, or change the `transport`")),
            );
        }
    }
    match transport {
        // An outbound-only channel may name its routing key instead of a queue.
        Transport::Amqp if record.get("routing-key").is_some() => {}
        Transport::Amqp => {
            cx.required(
                record,
                "queue",
                "add `queue:` with the AMQP queue it consumes from and publishes to (or \
                 `routing-key:` for a channel that only publishes)",
            );
        }
        Transport::Nats => {
            cx.required(
                record,
                "subject",
                "add `subject:` with the NATS subject it consumes from and publishes to",
            );
        }
        Transport::Http => {}
    }
}

fn check_url(cx: &mut Checker, url: &str, node: &Node, label: &str) {
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        cx.report(
            Diagnostic::error(
                "invalid-value",
                node.span,
                format!("{label} must be an http:// or https:// URL, not `{url}`"),
            )
            .with_hint("write the full address, such as `https://ledger.internal/entries`"),
        );
    }
}

/// The schema compiled, or the first reason it is not a valid JSON Schema, located inside it.
fn schema(cx: &mut Checker, node: &Node, label: &str) -> Option<Schema> {
    let source = cx.json(node, label)?;
    if !(source.is_object() || source.is_boolean()) {
        cx.report(
            Diagnostic::error(
                "invalid-schema",
                node.span,
                format!(
                    "{label} must be a JSON Schema (a map), not {}",
                    node.describe()
                ),
            )
            .with_hint("write it as a map, such as `{ type: object, required: [id] }`"),
        );
        return None;
    }
    match jsonschema::validator_for(&source) {
        Ok(validator) => Some(Schema {
            source,
            validator: Arc::new(validator),
        }),
        Err(error) => {
            cx.report(schema_error(node, label, &error));
            None
        }
    }
}

const JSON_TYPES: &[&str] = &[
    "string", "number", "integer", "boolean", "object", "array", "null",
];

fn schema_error(node: &Node, label: &str, error: &jsonschema::ValidationError) -> Diagnostic {
    if matches!(
        error.kind(),
        jsonschema::error::ValidationErrorKind::Referencing(_)
    ) {
        return Diagnostic::error(
            "invalid-schema",
            node.span,
            format!("{label} has a `$ref` that cannot be resolved"),
        )
        .with_hint("a `$ref` must point inside the schema, such as `#/$defs/amount`; remote schemas are never fetched");
    }
    let pointer = error.instance_path().to_string();
    let at = node.at_pointer(&pointer);
    if pointer.ends_with("/type") {
        let found = at
            .as_str()
            .map_or_else(|| at.describe().to_owned(), |text| format!("`{text}`"));
        return Diagnostic::error(
            "invalid-schema",
            at.span,
            format!("{label}: {found} is not a JSON Schema type"),
        )
        .with_hint(format!("use {}", listing(JSON_TYPES.iter().copied(), "or")));
    }
    Diagnostic::error(
        "invalid-schema",
        at.span,
        format!("{label} is not a valid JSON Schema: {error}"),
    )
    .with_hint(
        "the schema is read as JSON Schema 2020-12 unless it names another draft in `$schema`",
    )
}
