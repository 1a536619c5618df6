//! Every time the engine, the stores and the server read and every wait they make goes through
//! `sutra_store::Clock` (decision 0045): a direct read of the wall or monotonic clock, or a
//! direct tokio timer, would run on real time under a test's manual clock — a timer that fires
//! late or never, a deadline that a test cannot reach.

use std::path::{Path, PathBuf};

/// The crates whose sources must go through the clock.
const CRATES: &[&str] = &[
    "sutra-engine",
    "sutra-store",
    "sutra-store-sql",
    "sutra-store-sqlite",
    "sutra-store-postgres",
    "sutra-server",
];

/// What reads a clock or waits on one without `Clock`.
const FORBIDDEN: &[&str] = &[
    "Timestamp::now(",
    "Instant::now(",
    "SystemTime::now(",
    ".elapsed()",
    "tokio::time::",
];

/// Files or folders (relative to `crates/`) allowed to, and why.
const ALLOWED: &[(&str, &str)] = &[
    (
        "sutra-store/src/clock.rs",
        "the clock itself: the one place that reads the system's clocks and tokio's timers",
    ),
    (
        "sutra-store/src/conformance/",
        "the conformance suite is tests run against a store, behind a feature: its timeouts are \
         the tests' patience, and its `now` what a record written now is compared with",
    ),
    (
        "sutra-engine/src/history_log.rs",
        "`written_at`: when a history line was written, for the checker to put every replica's \
         lines on one time line; only `sutra serve` processes, on the system clock, write them",
    ),
    (
        "sutra-store-postgres/src/failover.rs",
        "the failover watcher (decision 0080) paces and times out probes of real database \
         servers on the wall clock: no step, claim or delivery reads it, and a test's manual \
         clock must not stop a replica from finding its promoted primary",
    ),
    (
        "sutra-server/src/connections",
        "the HTTP connections' header, idle and body timeouts (decision 0075) guard sockets \
         against real clients on the wall clock; no step, claim or delivery reads them, and a \
         test's manual clock must not stop them",
    ),
];

#[test]
fn no_source_reads_the_clock_or_waits_but_through_clock() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found = Vec::new();
    for krate in CRATES {
        for file in rust_files(&crates.join(krate).join("src")) {
            let relative = file
                .strip_prefix(&crates)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if ALLOWED
                .iter()
                .any(|(allowed, _)| relative.starts_with(allowed))
            {
                continue;
            }
            let source = std::fs::read_to_string(&file).unwrap();
            for (line, text) in outside_tests(&source) {
                if let Some(pattern) = FORBIDDEN.iter().find(|p| text.contains(*p)) {
                    found.push(format!(
                        "crates/{relative}:{line}: `{pattern}` in `{}`",
                        text.trim()
                    ));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "read the time and wait through `sutra_store::Clock` (`shared.clock.now()`, \
         `.instant()`, `.elapsed(..)`, `.sleep(..)`, `.sleep_until(..)`, `.timeout(..)`), not \
         directly; or add the file to ALLOWED with a reason (decision 0045):\n{}",
        found.join("\n")
    );
}

/// The numbered lines of `source` that are code: neither comments nor inside a `#[cfg(test)]`
/// module.
fn outside_tests(source: &str) -> Vec<(usize, &str)> {
    let mut kept = Vec::new();
    let mut lines = source.lines().enumerate();
    while let Some((index, text)) = lines.next() {
        let trimmed = text.trim_start();
        if trimmed == "#[cfg(test)]" {
            skip_item(&mut lines);
            continue;
        }
        if !trimmed.starts_with("//") {
            kept.push((index + 1, text));
        }
    }
    kept
}

/// Skips the item the attribute just read applies to: through its closing brace, or its `;`.
fn skip_item<'a>(lines: &mut impl Iterator<Item = (usize, &'a str)>) {
    let mut depth = 0usize;
    for (_, text) in lines.by_ref() {
        let opened = text.matches('{').count();
        let closed = text.matches('}').count();
        depth = (depth + opened).saturating_sub(closed);
        if depth == 0 && (closed > 0 || text.trim_end().ends_with(';')) {
            return;
        }
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}
