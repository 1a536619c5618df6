//! What a store can hold: PostgreSQL text cannot hold the character NUL (`\u0000`), so no value
//! holding it may reach an instance, an inbox row or a task — refused at the door (intake, the
//! API's bodies and URLs, a deployment's values) or failing the step that produced it (an
//! expression's result), alike on both stores. One rule, found here.

use serde_json::Value;

/// Whether a string or key anywhere in `value` holds NUL. Cheap: it allocates nothing, so
/// every value may be asked.
pub fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(text) => text.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(object) => object
            .iter()
            .any(|(key, item)| key.contains('\0') || holds_nul(item)),
        _ => false,
    }
}

/// The length of `value` written as JSON, counted without writing it.
pub fn json_bytes(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing JSON to a sink that cannot fail does not fail.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// The JSON pointers of every string (or key) in `value` holding NUL, for a refusal that names
/// them; none, at the cost of [`holds_nul`] alone, for a value without it.
pub fn nul_pointers(value: &Value) -> Vec<String> {
    let mut found = Vec::new();
    if holds_nul(value) {
        collect(value, "", &mut found);
    }
    found
}

fn collect(value: &Value, pointer: &str, found: &mut Vec<String>) {
    match value {
        Value::String(text) if text.contains('\0') => found.push(pointer.to_owned()),
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                collect(item, &format!("{pointer}/{i}"), found);
            }
        }
        Value::Object(object) => {
            for (key, item) in object {
                let child = format!("{pointer}/{}", key.replace('~', "~0").replace('/', "~1"));
                if key.contains('\0') {
                    found.push(child.clone());
                }
                collect(item, &child, found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nul_is_found_in_strings_and_keys_at_any_depth_and_named_by_pointer() {
        let clean = json!({"a": ["x", {"b": 1}], "c/d": "e"});
        assert!(!holds_nul(&clean));
        assert!(nul_pointers(&clean).is_empty());
        let dirty = json!({"a": ["x", {"b": "\u{0}"}], "c/d\u{0}": "e", "f": "g\u{0}"});
        assert!(holds_nul(&dirty));
        assert_eq!(nul_pointers(&dirty), ["/a/1/b", "/c~1d\u{0}", "/f"]);
    }
}
