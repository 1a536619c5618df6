//! Located diagnostics: what `sutra check` and `POST /v1/deployments` say about a document.
//!
//! The rendered text is a product surface (users read it, golden tests pin it), so its layout
//! follows rustc's, which most readers already know how to scan: severity and a stable rule id,
//! the position, the offending line with the offending part underlined, then a hint.

use serde_json::{Value, json};

/// A place in a source text. `line` and `column` are 1-based; `index` and `length` count chars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Span {
    pub line: usize,
    pub column: usize,
    pub index: usize,
    pub length: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    pub severity: Severity,
    /// A stable kebab-case id, such as `unknown-field`: tools and tests match on it.
    pub rule: &'static str,
    pub message: String,
    pub line: usize,
    pub column: usize,
    /// How many chars to underline, starting at `column`.
    pub length: usize,
    pub hint: Option<String>,
}

impl Diagnostic {
    pub fn error(rule: &'static str, at: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(Severity::Error, rule, at, message.into())
    }

    pub fn warning(rule: &'static str, at: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic::new(Severity::Warning, rule, at, message.into())
    }

    fn new(severity: Severity, rule: &'static str, at: Span, message: String) -> Diagnostic {
        Diagnostic {
            severity,
            rule,
            message,
            line: at.line.max(1),
            column: at.column.max(1),
            length: at.length,
            hint: None,
        }
    }

    pub fn with_hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hint = Some(hint.into());
        self
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The rustc-style text for this diagnostic, ending with a newline.
    pub fn render(&self, file: &str, source: &str) -> String {
        let number = self.line.to_string();
        let gutter = " ".repeat(number.len());
        let text = source
            .lines()
            .nth(self.line.saturating_sub(1))
            .unwrap_or("");
        let (shown, underline) = underline(text, self.column, self.length);
        let mut out = format!(
            "{}[{}]: {}\n{gutter}--> {file}:{}:{}\n{gutter} |\n{number} | {shown}\n{gutter} | {underline}\n",
            self.severity.as_str(),
            self.rule,
            self.message,
            self.line,
            self.column,
        );
        if let Some(hint) = &self.hint {
            out.push_str(&format!("{gutter} = hint: {hint}\n"));
        }
        out
    }

    /// The machine-readable form, for `sutra check --json` and the HTTP API.
    pub fn to_json(&self, file: &str) -> Value {
        json!({
            "file": file,
            "line": self.line,
            "column": self.column,
            "length": self.length,
            "severity": self.severity.as_str(),
            "rule": self.rule,
            "message": self.message,
            "hint": self.hint,
        })
    }
}

/// Renders every diagnostic, separated by blank lines.
pub fn render_all(diagnostics: &[Diagnostic], file: &str, source: &str) -> String {
    diagnostics
        .iter()
        .map(|d| d.render(file, source))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Orders diagnostics by position, so that output reads top to bottom.
pub fn sort(diagnostics: &mut [Diagnostic]) {
    diagnostics.sort_by(|a, b| {
        (a.line, a.column, a.severity, &a.message).cmp(&(b.line, b.column, b.severity, &b.message))
    });
}

/// Width a tab is shown with: it must be fixed, or the underline would not line up.
const TAB_WIDTH: usize = 4;

fn shown_width(c: char) -> usize {
    if c == '\t' { TAB_WIDTH } else { 1 }
}

/// The line as shown (tabs expanded) and the `^^^` line under `length` chars from `column`,
/// clipped to the line but never empty.
fn underline(text: &str, column: usize, length: usize) -> (String, String) {
    let shown = text.replace('\t', &" ".repeat(TAB_WIDTH));
    let chars: Vec<char> = text.chars().collect();
    let start = column.saturating_sub(1).min(chars.len());
    let end = (start + length).min(chars.len());
    let indent: usize = chars[..start].iter().map(|&c| shown_width(c)).sum();
    let width: usize = chars[start..end].iter().map(|&c| shown_width(c)).sum();
    (
        shown,
        format!("{}{}", " ".repeat(indent), "^".repeat(width.max(1))),
    )
}

/// The candidate closest to `word`, if it is close enough to be a plausible typo.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    // Longer words tolerate more typos; the cap keeps the quadratic distance cheap.
    const LONGEST: usize = 64;
    let word_length = word.chars().count();
    if word_length > LONGEST {
        return None;
    }
    let tolerance = word_length.max(3) / 3;
    let lowered = word.to_lowercase();
    candidates
        .into_iter()
        .filter(|candidate| candidate.chars().count() <= LONGEST)
        .map(|candidate| {
            (
                edit_distance(&lowered, &candidate.to_lowercase()),
                candidate,
            )
        })
        .filter(|&(distance, _)| distance <= tolerance)
        .min_by_key(|&(distance, _)| distance)
        .map(|(_, candidate)| candidate)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions (the commonest typo) each cost one.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut rows = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in rows.iter_mut().enumerate() {
        row[0] = i;
    }
    rows[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (rows[i - 1][j] + 1)
                .min(rows[i][j - 1] + 1)
                .min(rows[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(rows[i - 2][j - 2] + 1);
            }
            rows[i][j] = best;
        }
    }
    rows[a.len()][b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(line: usize, column: usize, length: usize) -> Span {
        Span {
            line,
            column,
            index: 0,
            length,
        }
    }

    #[test]
    fn renders_like_rustc() {
        let source = "a: 1\nnodes:\n  - id: debit\n    nxt: credit\n";
        let diagnostic = Diagnostic::error(
            "unknown-field",
            at(4, 5, 3),
            "unknown field `nxt` in node `debit`",
        )
        .with_hint("did you mean `next`?");
        assert_eq!(
            diagnostic.render("payments.yaml", source),
            "error[unknown-field]: unknown field `nxt` in node `debit`\n \
             --> payments.yaml:4:5\n  |\n4 |     nxt: credit\n  |     ^^^\n  \
             = hint: did you mean `next`?\n"
        );
    }

    #[test]
    fn underline_lines_up_under_tabs_and_stays_on_the_line() {
        assert_eq!(
            underline("\tab", 2, 1),
            ("    ab".to_string(), "    ^".to_string())
        );
        assert_eq!(underline("ab", 2, 50), ("ab".to_string(), " ^".to_string()));
        assert_eq!(underline("", 7, 0), (String::new(), "^".to_string()));
    }

    #[test]
    fn suggests_close_words_only() {
        let fields = ["id", "next", "output", "on-error", "receive"];
        assert_eq!(did_you_mean("nxt", fields), Some("next"));
        assert_eq!(did_you_mean("recieve", fields), Some("receive"));
        assert_eq!(did_you_mean("Next", fields), Some("next"));
        assert_eq!(did_you_mean("colour", fields), None);
    }

    #[test]
    fn sorts_by_position() {
        let mut diagnostics = vec![
            Diagnostic::warning("b", at(3, 1, 1), "later"),
            Diagnostic::error("a", at(1, 9, 1), "earlier"),
        ];
        sort(&mut diagnostics);
        assert_eq!(diagnostics[0].message, "earlier");
    }
}
