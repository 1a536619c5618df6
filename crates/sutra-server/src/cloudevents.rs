//! CloudEvents 1.0 over HTTP: structured mode (the event is the JSON body) and binary mode
//! (`ce-*` headers, the body is `data`). Anything else is `SUTRA.INTAKE.DECODE` with a message
//! that says which attribute is missing or wrong.

use axum::http::HeaderMap;
use serde_json::{Map, Value};
use sutra_core::step::Message;

const REQUIRED: [&str; 3] = ["id", "type", "source"];

pub fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Message, String> {
    if headers.contains_key("ce-id") || headers.contains_key("ce-specversion") {
        binary(headers, body)
    } else {
        structured(body)
    }
}

fn structured(body: &[u8]) -> Result<Message, String> {
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

fn binary(headers: &HeaderMap, body: &[u8]) -> Result<Message, String> {
    let header = |name: &str| -> Result<Option<String>, String> {
        headers
            .get(format!("ce-{name}"))
            .map(|value| {
                value
                    .to_str()
                    .map(str::to_owned)
                    .map_err(|_| format!("header ce-{name} is not valid text"))
            })
            .transpose()
    };
    check_specversion(header("specversion")?.as_deref())?;
    let [id, kind, source] = REQUIRED.map(|name| {
        header(name)?
            .filter(|v| !v.is_empty())
            .ok_or_else(|| format!("binary mode needs the header ce-{name}"))
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
        subject: header("subject")?,
        time: header("time")?,
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
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn structured_events_decode() {
        let body = br#"{"specversion":"1.0","id":"e1","type":"t","source":"s","data":{"a":1}}"#;
        let message = decode(&HeaderMap::new(), body).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["a"].as_i64()),
            ("e1", Some(1))
        );
    }

    #[test]
    fn binary_events_decode() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("ce-specversion", "1.0"),
            ("ce-id", "e2"),
            ("ce-type", "t"),
            ("ce-source", "s"),
        ] {
            headers.insert(name, HeaderValue::from_static(value));
        }
        let message = decode(&headers, br#"{"b":2}"#).unwrap();
        assert_eq!(
            (message.id.as_str(), message.data["b"].as_i64()),
            ("e2", Some(2))
        );
    }

    #[test]
    fn what_is_missing_is_named() {
        let error = decode(
            &HeaderMap::new(),
            br#"{"specversion":"1.0","type":"t","source":"s"}"#,
        )
        .unwrap_err();
        assert!(error.contains("`id`"), "{error}");
        let error = decode(&HeaderMap::new(), b"not json").unwrap_err();
        assert!(error.contains("not valid JSON"), "{error}");
    }
}
