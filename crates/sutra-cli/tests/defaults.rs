//! The documented defaults are what a bare `sutra serve` runs with: the lanes, the claim
//! timeout, the sweep interval, the lease timings and the HTTP server's timeouts
//! docs/spec.md's configuration table gives, read from that table, against what the running
//! process says it runs with.
//!
//! A replica shows these in its `serving` log line: the one place an operator reads them, for
//! neither `/metrics` nor the API echo the configuration, and the claim timeout and the sweep
//! interval could otherwise be seen only by waiting them out.

use jiff::SignedDuration;
use sutra_testkit::{Scratch, Server, serve};

/// The keys this promise is about, with the field of the `serving` line that shows each.
const SHOWN: &[(&str, &str)] = &[
    ("sutra.engine.lanes", "lanes"),
    ("sutra.instance.claim-timeout", "claim_timeout"),
    ("sutra.instance.sweep-interval", "sweep_interval"),
    ("sutra.lease.ttl", "lease_ttl"),
    ("sutra.lease.poll", "lease_poll"),
    ("sutra.http.header-timeout", "header_timeout"),
    ("sutra.http.idle-timeout", "idle_timeout"),
    ("sutra.http.body-timeout", "body_timeout"),
];

/// The defaults docs/spec.md's configuration table gives, by key. A row may name several keys
/// (`` `a` / `b` ``), their defaults then given in the same order (`` `1` / `2` ``), before
/// any explanation; a default that is not a quoted value (`sutra.replica-id`'s) is not read.
fn documented_defaults() -> Vec<(String, String)> {
    let spec = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/spec.md");
    let text = std::fs::read_to_string(spec).expect("docs/spec.md");
    let mut defaults = Vec::new();
    for row in text.lines().filter(|line| line.starts_with("| `sutra.")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        defaults.extend(quoted(cells[1]).into_iter().zip(quoted(cells[2])));
    }
    defaults
}

/// The `` `quoted` `` words of a table cell, in order.
fn quoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Two settings agree: the same duration, however written, or the same word.
fn same(documented: &str, running: &str) -> bool {
    match (
        documented.parse::<SignedDuration>(),
        running.parse::<SignedDuration>(),
    ) {
        (Ok(documented), Ok(running)) => documented == running,
        _ => documented == running,
    }
}

#[test]
fn a_bare_sutra_serve_runs_with_the_documented_defaults() {
    let documented = documented_defaults();
    let scratch = Scratch::new("defaults");
    // Nothing but the store and a free port, which the defaults at issue do not depend on.
    let mut server = Server::start(&serve!(scratch.database()).env("SUTRA_LOG", "info"));
    let serving = sutra_testkit::log_fields(&server.wait_for_stderr(" serving "));

    for (key, field) in SHOWN {
        let default = documented
            .iter()
            .find(|(documented, _)| documented == key)
            .map(|(_, default)| default)
            .unwrap_or_else(|| panic!("docs/spec.md's table has no default for {key}"));
        let running = serving
            .iter()
            .find(|(shown, _)| shown == field)
            .map(|(_, value)| value)
            .unwrap_or_else(|| panic!("the serving line shows no {field}: {serving:?}"));
        assert!(
            same(default, running),
            "{key}: docs/spec.md says {default}, a bare `sutra serve` runs with {running}"
        );
    }
}
