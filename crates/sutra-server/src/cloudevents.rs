//! CloudEvents 1.0 over HTTP: structured mode (the event is the JSON body) and binary mode
//! (`ce-*` headers, the body is `data`), decoded by the rules every transport shares
//! ([`sutra_core::cloud_event`]). Anything else is `SUTRA.INTAKE.DECODE` with a message
//! that says which attribute is missing or wrong.

use axum::http::HeaderMap;
use sutra_core::cloud_event;
use sutra_core::step::Message;

/// Binary mode when a `ce-id` or `ce-specversion` header is there, structured mode otherwise.
pub fn decode(headers: &HeaderMap, body: &[u8]) -> Result<Message, String> {
    cloud_event::decode(|name| header(headers, name), body)
}

fn header(headers: &HeaderMap, attribute: &str) -> Result<Option<String>, String> {
    headers
        .get(format!("ce-{attribute}"))
        .map(|value| {
            value
                .to_str()
                .map(str::to_owned)
                .map_err(|_| format!("header ce-{attribute} is not valid text"))
        })
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn binary_mode_is_told_by_its_headers() {
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
        let missing = decode(&HeaderMap::new(), br#"{"specversion":"1.0"}"#).unwrap_err();
        assert!(missing.contains("`id`"), "{missing}");
    }
}
