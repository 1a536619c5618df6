//! `start: { schedule }`: what a schedule reads as, its defaults, and what it refuses.

use jiff::SignedDuration;
use serde_json::{Value as Json, json};

use super::check;
use super::tests::{deployment, rules};
use crate::diagnostic::Diagnostic;
use crate::expr::{Bindings, Template};
use crate::model::*;
use crate::schedule::{Cron, When};

/// A document whose flow `report` starts as `start` says (YAML inside the `start:` map) and
/// emits its input on `reports`.
fn nightly(start: &str) -> String {
    format!(
        "name: nightly
channels:
  reports: {{ transport: http, url: 'https://reports.internal/hook' }}
  requests: {{ transport: http }}
flows:
  report:
    start:
{start}
    nodes:
      - {{ id: build, emit: {{ channel: reports, data: \"= vars.input\" }} }}
"
    )
}

fn schedule_of(deployment: &Deployment) -> &Schedule {
    let flow = &deployment.flows["report"];
    assert_eq!(flow.start_channel(), None);
    flow.schedule().expect("a scheduled flow")
}

#[test]
fn a_schedule_reads_its_cron_zone_overlap_catch_up_and_input() {
    let deployment = deployment(&nightly(
        "      schedule:
        cron: \"0 2 * * *\"
        timezone: europe/berlin
        overlap: allow
        catch-up: none
        input: { kind: nightly, at: \"= tick\" }",
    ));
    let schedule = schedule_of(&deployment);
    assert_eq!(schedule.when, When::Cron(Cron::parse("0 2 * * *").unwrap()));
    // The database's spelling, whatever the case written.
    assert_eq!(schedule.zone_name, "Europe/Berlin");
    assert_eq!(schedule.zone.iana_name(), Some("Europe/Berlin"));
    assert_eq!(schedule.overlap, Overlap::Allow);
    assert_eq!(schedule.catch_up, CatchUp::None);
    assert_eq!(schedule.expression(), "cron 0 2 * * *");
    let tick: jiff::Timestamp = "2026-03-01T01:00:00Z".parse().unwrap();
    let input = schedule
        .input
        .render(&Bindings::new().timestamp("tick", tick))
        .unwrap();
    assert_eq!(input["kind"], "nightly");
    assert!(
        input["at"]
            .as_str()
            .unwrap()
            .starts_with("2026-03-01T01:00:00")
    );
    // No channel is claimed: another flow may start on any declared one.
    assert_eq!(deployment.flows_starting_on("requests").count(), 0);
}

#[test]
fn a_schedule_defaults_to_utc_skip_one_and_an_empty_input() {
    let deployment = deployment(&nightly("      schedule: { every: PT15M }"));
    let schedule = schedule_of(&deployment);
    assert_eq!(schedule.when, When::Every(SignedDuration::from_mins(15)));
    assert_eq!(schedule.zone_name, "UTC");
    assert_eq!(schedule.zone, jiff::tz::TimeZone::UTC);
    assert_eq!(schedule.overlap, Overlap::Skip);
    assert_eq!(schedule.catch_up, CatchUp::One);
    assert!(matches!(&schedule.input, Template::Literal(Json::Object(input)) if input.is_empty()));
}

#[test]
fn one_second_is_the_shortest_period() {
    let deployment = deployment(&nightly("      schedule: { every: PT1S }"));
    let schedule = schedule_of(&deployment);
    assert_eq!(schedule.when, When::Every(SignedDuration::from_secs(1)));
    for short in ["PT0.999S", "PT0.5S"] {
        let source = nightly(&format!("      schedule: {{ every: {short} }}"));
        assert_eq!(rules(&source), ["every-too-short"], "{short}");
    }
    assert_eq!(
        rules(&nightly("      schedule: { every: PT0S }")),
        ["invalid-duration"]
    );
}

#[test]
fn a_schedule_input_sees_only_the_tick() {
    let source = nightly("      schedule: { every: PT1H, input: { x: \"= vars.x\" } }");
    let checked = check(&source);
    let rules: Vec<_> = checked.diagnostics.iter().map(|d| d.rule).collect();
    assert_eq!(rules, ["invalid-expression"]);
    let hint = checked.diagnostics[0].hint.as_deref().unwrap_or_default();
    assert!(hint.contains("`tick`"), "{hint}");
}

#[test]
fn a_start_is_a_channel_or_a_schedule() {
    let both = nightly("      channel: requests\n      schedule: { cron: \"0 2 * * *\" }");
    assert_eq!(rules(&both), ["start-channel-and-schedule"]);
    // The schedule's own mistakes are reported in the same run.
    let both = nightly("      channel: requests\n      schedule: { cron: \"0 2 * *\" }");
    assert_eq!(rules(&both), ["start-channel-and-schedule", "invalid-cron"]);
    let neither = nightly("      {}");
    assert_eq!(rules(&neither), ["missing-field"]);
    let checked = check(&neither);
    let hint = checked.diagnostics[0].hint.as_deref().unwrap_or_default();
    assert!(
        hint.contains("channel") && hint.contains("schedule"),
        "{hint}"
    );
    assert_eq!(
        rules(&nightly("      scheduled: { every: PT1H }")),
        ["missing-field", "unknown-field"]
    );
}

#[test]
fn a_schedule_fires_by_exactly_one_rule() {
    let cases = [
        ("{ cron: \"0 2 * * *\", every: PT1H }", "cron-and-every"),
        ("{ timezone: UTC }", "schedule-without-when"),
        ("{ cron: \"0 24 * * *\" }", "invalid-cron"),
        ("{ cron: \"0 0 30 2 *\" }", "cron-never-fires"),
        ("{ cron: \"0 0 31 4,6,9,11 *\" }", "cron-never-fires"),
        (
            "{ every: PT1H, timezone: Mars/Olympus }",
            "unknown-timezone",
        ),
        ("{ every: PT1H, timezone: Etc/Unknown }", "unknown-timezone"),
        ("{ every: PT1H, overlap: queue }", "invalid-value"),
        ("{ every: PT1H, catch-up: all }", "invalid-value"),
        ("{ every: PT1H, at: noon }", "unknown-field"),
        ("{ every: P1M }", "invalid-duration"),
        ("PT1H", "wrong-type"),
    ];
    for (schedule, rule) in cases {
        let source = nightly(&format!("      schedule: {schedule}"));
        assert_eq!(rules(&source), [rule], "{schedule}");
    }
    // The 29th of February comes within the horizon.
    deployment(&nightly("      schedule: { cron: \"0 0 29 2 *\" }"));
}

#[test]
fn a_bad_cron_is_pointed_at_its_field() {
    let source = nightly("      schedule: { cron: \"0 2 * 13 *\" }");
    let checked = check(&source);
    let diagnostic = &checked.diagnostics[0];
    assert_eq!(diagnostic.rule, "invalid-cron");
    assert!(
        diagnostic.message.contains("month field `13`"),
        "{}",
        diagnostic.message
    );
    assert_eq!(underlined(&source, diagnostic), "13");
    // Four fields: the whole expression.
    let source = nightly("      schedule: { cron: \"0 2 * *\" }");
    let diagnostic = &check(&source).diagnostics[0];
    assert_eq!(underlined(&source, diagnostic).trim_end(), "\"0 2 * *\"");
}

fn underlined(source: &str, diagnostic: &Diagnostic) -> String {
    let line = source.lines().nth(diagnostic.line - 1).unwrap_or_default();
    let chars = line.chars().skip(diagnostic.column - 1);
    chars.take(diagnostic.length).collect()
}

#[test]
fn a_scheduled_flow_renders_its_input_as_json() {
    let deployment = deployment(&nightly(
        "      schedule: { every: PT1H, input: [\"= tick\", 1] }",
    ));
    let schedule = schedule_of(&deployment);
    let tick: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    let input = schedule
        .input
        .render(&Bindings::new().timestamp("tick", tick))
        .unwrap();
    assert_eq!(input[1], json!(1));
}
