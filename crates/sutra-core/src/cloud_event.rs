//! CloudEvents 1.0 coming in, on every transport: the rules, once.
//!
//! A message arrives in structured mode (the event is the JSON body) or binary mode (the
//! attributes are headers — `ce-id` over HTTP and NATS, `cloudEvents:id` or `ce-id` over AMQP —
//! and the body is `data`). Each transport says how to read an attribute's header; which mode a
//! message is in, and what makes it a CloudEvent, is decided here. Anything that is not a
//! CloudEvent is refused with a reason that names the attribute missing or wrong.
//!
//! Pure, like the rest of the core: bytes and header text in, a [`Message`] or a reason out.
//! Kept here rather than beside the transports so that it can be tested and fuzzed without a
//! broker client or an HTTP stack (decision 0042).

use serde_json::{Map, Value};

use crate::step::Message;

/// The attributes every event must carry.
const REQUIRED: [&str; 3] = ["id", "type", "source"];

/// The CloudEvent a message carries: binary mode when `attribute` finds an `id` or a
/// `specversion` among its headers, structured mode otherwise. `attribute(name)` reads the header
/// that carries attribute `name`: `Ok(None)` when there is none, an error when it is there but
/// is not text.
pub fn decode(
    attribute: impl Fn(&str) -> Result<Option<String>, String>,
    body: &[u8],
) -> Result<Message, String> {
    if attribute("id")?.is_some() || attribute("specversion")?.is_some() {
        binary(attribute, body)
    } else {
        structured(body)
    }
}

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

    use super::*;

    fn headers<'a>(
        pairs: &'a HashMap<&str, &str>,
    ) -> impl Fn(&str) -> Result<Option<String>, String> + 'a {
        |name: &str| Ok(pairs.get(name).map(|v| (*v).to_owned()))
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
        let pairs: HashMap<&str, &str> = [
            ("specversion", "1.0"),
            ("id", "e2"),
            ("type", "t"),
            ("source", "s"),
        ]
        .into();
        let message = binary(headers(&pairs), br#"{"b":2}"#).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["b"].as_i64()),
            ("e2", Some(2))
        );
    }

    #[test]
    fn the_mode_is_told_by_an_id_or_specversion_header() {
        let binary: HashMap<&str, &str> = [
            ("specversion", "1.0"),
            ("id", "e3"),
            ("type", "t"),
            ("source", "s"),
        ]
        .into();
        assert_eq!(decode(headers(&binary), b"").unwrap().id, "e3");
        let only_version: HashMap<&str, &str> = [("specversion", "1.0")].into();
        let error = decode(headers(&only_version), b"").unwrap_err();
        assert!(
            error.contains("binary mode needs the attribute `id`"),
            "{error}"
        );
        let body = br#"{"specversion":"1.0","id":"e4","type":"t","source":"s"}"#;
        assert_eq!(decode(headers(&HashMap::new()), body).unwrap().id, "e4");
        let unreadable = decode(|_| Err("header ce-id is not valid text".into()), body);
        assert_eq!(unreadable.unwrap_err(), "header ce-id is not valid text");
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
