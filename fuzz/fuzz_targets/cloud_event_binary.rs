//! A CloudEvent as a transport hands it over — attribute headers and a body — through the
//! decoder that tells the mode (binary when an `id` or `specversion` header is there) and reads
//! it. HTTP, AMQP and NATS differ only in how they read a header's text; each can answer that
//! there is none, some text (UTF-8, possibly empty), or that the header is there but is not
//! text, and this target drives all three.
//!
//! The input: header lines `name=value` (`name!` for a header that is not text), then an empty
//! line, then the body. Without an empty line the whole input is the body.
#![no_main]

use std::collections::HashMap;

use libfuzzer_sys::fuzz_target;
use sutra_core::cloud_event;

fuzz_target!(|data: &[u8]| {
    let (headers, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(at) => (&data[..at], &data[at + 2..]),
        None => (&b""[..], data),
    };
    let mut attributes: HashMap<String, Result<String, String>> = HashMap::new();
    for line in headers.split(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(line);
        if let Some((name, value)) = text.split_once('=') {
            attributes.insert(name.to_owned(), Ok(value.to_owned()));
        } else if let Some(name) = text.strip_suffix('!') {
            attributes.insert(
                name.to_owned(),
                Err(format!("header ce-{name} is not text")),
            );
        }
    }
    let attribute = |name: &str| attributes.get(name).cloned().transpose();
    if let Ok(message) = cloud_event::decode(attribute, body) {
        assert!(!message.id.is_empty() && !message.kind.is_empty() && !message.source.is_empty());
        let _ = message.to_json();
    }
});
