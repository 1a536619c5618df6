//! What the fuzz targets share.

use std::collections::HashSet;
use std::sync::Mutex;

/// For targets whose code under test catches panics on purpose — the YAML reader around
/// saphyr-parser, the CEL compiler and evaluator around the `cel` crate — and turns them into
/// errors: such a panic is the product working as designed, not a crash. libfuzzer-sys's hook
/// aborts on every panic, caught or not; this one only reports each place that panicked, once,
/// and lets the panic unwind. A panic nothing catches still reaches libfuzzer-sys, which aborts:
/// that is a crash, as it would take the process down.
pub fn tolerate_caught_panics() {
    static SEEN: Mutex<Option<HashSet<String>>> = Mutex::new(None);
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map_or_else(|| "somewhere".to_owned(), ToString::to_string);
        let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if seen.get_or_insert_with(HashSet::new).insert(place.clone()) {
            eprintln!("panic at {place} (reported once; the code under test catches it): {info}");
        }
    }));
}

/// Splits `data` at the first `separator`: what comes before it, and what after (empty when
/// there is none).
pub fn split(data: &[u8], separator: u8) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == separator) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[]),
    }
}
