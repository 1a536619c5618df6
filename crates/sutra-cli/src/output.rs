//! Human output shared by the commands: aligned tables, labelled blocks, trimmed times and
//! one-line JSON, written to stdout without failing on a closed pipe.
//!
//! A table is a few lines of code here rather than a crate: the commands need left-aligned
//! columns and nothing else.

use std::io::Write;

use serde_json::Value;
use sutra_client::{Page, StatusChange};

/// Columns between cells.
const GAP: &str = "  ";

/// Rows of cells under a header, each column as wide as its widest cell.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|cell| (*cell).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "one cell per column");
        self.rows.push(cells);
    }

    pub fn render(&self) -> String {
        let mut widths: Vec<usize> = self.header.iter().map(|cell| width(cell)).collect();
        for row in &self.rows {
            for (column, cell) in row.iter().enumerate() {
                widths[column] = widths[column].max(width(cell));
            }
        }
        std::iter::once(&self.header)
            .chain(&self.rows)
            .map(|row| line(row, &widths))
            .collect()
    }
}

fn width(text: &str) -> usize {
    text.chars().count()
}

/// One row, padded to the column widths; the last cell is not padded, so no line ends in blanks.
fn line(cells: &[String], widths: &[usize]) -> String {
    let padded: Vec<String> = cells
        .iter()
        .zip(widths)
        .map(|(cell, width)| format!("{cell:<width$}"))
        .collect();
    format!("{}\n", padded.join(GAP).trim_end())
}

/// `label  value` lines with the values aligned; a multi-line value continues under itself.
pub fn fields(pairs: &[(&str, String)]) -> String {
    let label_width = pairs
        .iter()
        .map(|(label, _)| width(label))
        .max()
        .unwrap_or(0);
    let continuation = " ".repeat(label_width + GAP.len());
    pairs
        .iter()
        .map(|(label, value)| {
            let value = value.replace('\n', &format!("\n{continuation}"));
            format!("{label:<label_width$}{GAP}{value}\n")
        })
        .collect()
}

/// `text` with every line indented by two spaces.
pub fn indented(text: &str) -> String {
    text.lines().map(|line| format!("  {line}\n")).collect()
}

/// An RFC 3339 time to the second: `2026-11-29T10:00:00.123456Z` → `2026-11-29T10:00:00Z`.
pub fn time(rfc3339: &str) -> String {
    let Some(dot) = rfc3339.find('.') else {
        return rfc3339.to_owned();
    };
    let fraction_end = rfc3339[dot + 1..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(rfc3339.len(), |offset| dot + 1 + offset);
    format!("{}{}", &rfc3339[..dot], &rfc3339[fraction_end..])
}

/// Compact JSON on one line, cut at `max_chars`; nothing for null and empty objects.
pub fn one_line(value: &Value, max_chars: usize) -> String {
    let text = match value {
        Value::Null => return String::new(),
        Value::Object(map) if map.is_empty() => return String::new(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    if width(&text) <= max_chars {
        text
    } else {
        let cut: String = text.chars().take(max_chars.saturating_sub(1)).collect();
        format!("{cut}…")
    }
}

/// Indented JSON, for variables and replies.
pub fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("a JSON value always serializes")
}

/// "1 instance", "2 instances".
pub fn counted(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `instance ID: STATUS`, as every command that changes an instance reports it.
pub fn instance_status(instance: &str, status: &str) -> String {
    format!("instance {instance}: {status}\n")
}

/// The answer to `cancel` and `restore`; a restore refused by a held claim is asked for later.
pub fn status_change(change: &StatusChange) -> String {
    let line = instance_status(&change.instance, &change.status);
    match change.extra.get("restore").and_then(|asked| asked.as_str()) {
        Some("asked") => format!(
            "{}, restore asked: it runs once the instance's claim is free\n",
            line.trim_end()
        ),
        _ => line,
    }
}

/// A page of a list as a table, one row per item, and how to ask for the next page.
pub fn page<T>(
    page: &Page<T>,
    noun: &str,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) -> String {
    if page.items.is_empty() {
        return format!("no {noun}s\n");
    }
    let mut table = Table::new(header);
    for item in &page.items {
        table.row(row(item));
    }
    let footer = match &page.next {
        Some(cursor) => format!(
            "({} shown; the next page is --after {cursor})\n",
            counted(page.items.len(), noun)
        ),
        None => String::new(),
    };
    table.render() + &footer
}

/// A reader that stops early (`| head`) is not an error worth a panic or a message.
pub fn write_stdout(text: &str) {
    let _ = std::io::stdout().lock().write_all(text.as_bytes());
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn table_columns_align_on_their_widest_cell_without_trailing_blanks() {
        let mut table = Table::new(&["ID", "STATUS", "FLOW"]);
        table.row(vec!["a-long-id".into(), "failed".into(), "order".into()]);
        table.row(vec!["b".into(), "suspended".into(), "".into()]);
        assert_eq!(
            table.render(),
            "ID         STATUS     FLOW\n\
             a-long-id  failed     order\n\
             b          suspended\n"
        );
    }

    #[test]
    fn a_page_says_when_it_is_empty_and_how_to_get_the_next_one() {
        let row = |n: &u32| vec![n.to_string()];
        let empty = Page {
            items: Vec::new(),
            next: None,
        };
        assert_eq!(page(&empty, "task", &["N"], row), "no tasks\n");
        let full = Page {
            items: vec![1, 2],
            next: Some("c2".to_owned()),
        };
        assert_eq!(
            page(&full, "task", &["N"], row),
            "N\n1\n2\n(2 tasks shown; the next page is --after c2)\n"
        );
    }

    #[test]
    fn fields_align_values_and_continue_multi_line_ones_under_themselves() {
        let block = fields(&[
            ("status", "failed".into()),
            ("failure", "ORDER.EXPIRED\nno payment".into()),
        ]);
        assert_eq!(
            block,
            "status   failed\nfailure  ORDER.EXPIRED\n         no payment\n"
        );
    }

    #[test]
    fn times_lose_their_fraction_and_keep_their_offset() {
        assert_eq!(time("2026-11-29T10:00:00.123456Z"), "2026-11-29T10:00:00Z");
        assert_eq!(
            time("2026-11-29T10:00:00.5+01:00"),
            "2026-11-29T10:00:00+01:00"
        );
        assert_eq!(time("2026-11-29T10:00:00Z"), "2026-11-29T10:00:00Z");
    }

    #[test]
    fn one_line_json_is_cut_with_an_ellipsis_and_empty_details_vanish() {
        assert_eq!(one_line(&json!({"a": 1}), 20), r#"{"a":1}"#);
        assert_eq!(one_line(&json!("plain"), 20), "plain");
        assert_eq!(
            one_line(&json!({"key": "a long value"}), 10),
            r#"{"key":"a…"#
        );
        assert_eq!(one_line(&json!({}), 10), "");
        assert_eq!(one_line(&Value::Null, 10), "");
    }
}
