//! CloudEvents 1.0 on every transport, both ways.
//!
//! Out: an outbox row leaves in structured mode (`application/cloudevents+json`), the mode that
//! carries every attribute in the body, so a receiver needs no header mapping to read it.
//!
//! In: a message arrives in structured mode (the event is the JSON body) or binary mode (the
//! attributes are headers — `ce-id` over HTTP and NATS, `cloudEvents:id` or `ce-id` over AMQP —
//! and the body is `data`). Each transport says which mode a message is in and how to read an
//! attribute's header; the rules are here once. Anything that is not a CloudEvent is refused
//! with a reason that names the attribute missing or wrong.

use serde_json::{Map, Value, json};
use sutra_core::step::Message;
use sutra_store::OutboxRow;

/// The media type of a structured-mode event.
pub const CONTENT_TYPE: &str = "application/cloudevents+json";

/// The CloudEvents 1.0 structured-mode body of a row. The emit's `key`, when it has one, is the
/// `partitionkey` of the CloudEvents partitioning extension.
pub fn cloud_event(row: &OutboxRow) -> Value {
    let mut event = json!({
        "specversion": "1.0",
        "id": row.entry.idempotency_key,
        "type": format!("sutra.{}.{}", row.deployment, row.entry.channel),
        "source": format!("sutra://{}/{}/{}", row.tenant, row.deployment, row.version),
        "subject": row.instance,
        "datacontenttype": "application/json",
        "data": row.entry.payload,
    });
    if let Some(key) = &row.entry.message_key {
        event["partitionkey"] = json!(key);
    }
    event
}

/// The attributes every event must carry.
const REQUIRED: [&str; 3] = ["id", "type", "source"];

/// A structured-mode event: the body is the event's JSON.
pub fn structured(body: &[u8]) -> Result<Message, String> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        format!("the body is not valid JSON ({e}); send a CloudEvents 1.0 JSON event, or use binary mode with ce-* headers")
    })?;
    let Value::Object(mut event) = value else {
        return Err(
            "the body must be a CloudEvents JSON object with specversion, id, type and source"
                .into(),
        );
    };
    check_specversion(event.get("specversion").and_then(Value::as_str))?;
    if event.contains_key("data_base64") {
        return Err("`data_base64` is not supported: send JSON `data`".into());
    }
    let [id, kind, source] = REQUIRED.map(|name| required(&event, name));
    Ok(Message {
        id: id?,
        kind: kind?,
        source: source?,
        subject: optional(&event, "subject")?,
        time: optional(&event, "time")?,
        data: event.remove("data").unwrap_or(Value::Null),
    })
}

/// A binary-mode event: `attribute(name)` reads the header that carries attribute `name` (an
/// error when the header is there but is not text), and the body is the event's JSON `data`.
pub fn binary(
    attribute: impl Fn(&str) -> Result<Option<String>, String>,
    body: &[u8],
) -> Result<Message, String> {
    check_specversion(attribute("specversion")?.as_deref())?;
    let [id, kind, source] = REQUIRED.map(|name| {
        attribute(name)?
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("binary mode needs the attribute `{name}` as a header"))
    });
    let data = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Null
    } else {
        serde_json::from_slice(body).map_err(|e| format!("binary mode data must be JSON ({e})"))?
    };
    Ok(Message {
        id: id?,
        kind: kind?,
        source: source?,
        subject: attribute("subject")?,
        time: attribute("time")?,
        data,
    })
}

fn check_specversion(version: Option<&str>) -> Result<(), String> {
    match version {
        Some("1.0") => Ok(()),
        Some(other) => Err(format!(
            "specversion `{other}` is not supported; use \"1.0\""
        )),
        None => Err(
            "the event has no specversion; CloudEvents 1.0 requires \"specversion\": \"1.0\""
                .into(),
        ),
    }
}

fn required(event: &Map<String, Value>, name: &str) -> Result<String, String> {
    match event.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        Some(_) => Err(format!(
            "the event attribute `{name}` must be a non-empty string"
        )),
        None => Err(format!(
            "the event has no `{name}`; CloudEvents requires id, type and source"
        )),
    }
}

fn optional(event: &Map<String, Value>, name: &str) -> Result<Option<String>, String> {
    match event.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("the event attribute `{name}` must be a string")),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use sutra_store::{OutboxEntry, OutboxId};

    use super::*;

    fn row(message_key: Option<&str>) -> OutboxRow {
        OutboxRow {
            id: OutboxId(7),
            tenant: "acme".to_owned(),
            instance: "0190c0de-0000-7000-8000-000000000001".to_owned(),
            deployment: "payments".to_owned(),
            version: 3,
            entry: OutboxEntry {
                channel: "ledger".to_owned(),
                payload: json!({ "transfer": "t-1", "status": "ok" }),
                message_key: message_key.map(str::to_owned),
                idempotency_key: "0190c0de-0000-7000-8000-000000000001:4:notify".to_owned(),
            },
            attempts: 2,
        }
    }

    #[test]
    fn the_event_is_identified_by_the_idempotency_key_and_addressed_by_its_version() {
        assert_eq!(
            cloud_event(&row(None)),
            json!({
                "specversion": "1.0",
                "id": "0190c0de-0000-7000-8000-000000000001:4:notify",
                "type": "sutra.payments.ledger",
                "source": "sutra://acme/payments/3",
                "subject": "0190c0de-0000-7000-8000-000000000001",
                "datacontenttype": "application/json",
                "data": { "transfer": "t-1", "status": "ok" },
            })
        );
    }

    #[test]
    fn the_emits_key_is_the_partition_key() {
        assert_eq!(cloud_event(&row(Some("t-1")))["partitionkey"], "t-1");
    }

    #[test]
    fn structured_events_decode() {
        let body = br#"{"specversion":"1.0","id":"e1","type":"t","source":"s","data":{"a":1}}"#;
        let message = structured(body).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["a"].as_i64()),
            ("e1", Some(1))
        );
    }

    #[test]
    fn binary_events_decode() {
        let headers: HashMap<&str, &str> = [
            ("specversion", "1.0"),
            ("id", "e2"),
            ("type", "t"),
            ("source", "s"),
        ]
        .into();
        let attribute = |name: &str| Ok(headers.get(name).map(|v| (*v).to_owned()));
        let message = binary(attribute, br#"{"b":2}"#).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["b"].as_i64()),
            ("e2", Some(2))
        );
    }

    #[test]
    fn what_is_missing_is_named() {
        let error = structured(br#"{"specversion":"1.0","type":"t","source":"s"}"#).unwrap_err();
        assert!(error.contains("`id`"), "{error}");
        let error = structured(b"not json").unwrap_err();
        assert!(error.contains("not valid JSON"), "{error}");
        let error = binary(|_| Ok(Some("1.0".to_owned())), b"{").unwrap_err();
        assert!(error.contains("data must be JSON"), "{error}");
    }
}
