//! A structured-mode CloudEvent: the body of an HTTP intake request or a broker message with no
//! attribute headers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra_core::cloud_event;

fuzz_target!(|data: &[u8]| {
    if let Ok(message) = cloud_event::structured(data) {
        assert!(!message.id.is_empty() && !message.kind.is_empty() && !message.source.is_empty());
        let _ = message.to_json();
    }
});
