//! What a test reads of a server's log lines.

/// The `field=value` pairs of a log line (such as the `serving` line's settings), its colours
/// removed.
pub fn log_fields(line: &str) -> Vec<(String, String)> {
    let plain = without_colours(line);
    plain
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(field, value)| (field.to_owned(), value.to_owned()))
        .collect()
}

/// `line` without its ANSI escape sequences (`ESC [ … letter`).
fn without_colours(line: &str) -> String {
    let mut plain = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            chars.by_ref().find(char::is_ascii_alphabetic);
        } else {
            plain.push(c);
        }
    }
    plain
}
