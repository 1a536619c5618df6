//! When a schedule fires (issue 34): cron fields and their errors, and the ticks across the
//! daylight-saving days of Europe/Berlin and America/New_York in 2026 — a local time skipped by
//! a spring-forward fires once, at the first instant after the gap; a local time repeated by a
//! fall-back fires once, at its earlier instant. No clock is waited on.

use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};
use sutra_core::schedule::{Cron, When};

fn cron(source: &str) -> When {
    When::Cron(Cron::parse(source).unwrap_or_else(|e| panic!("{source}: {e}")))
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// The `count` ticks of `when` in `zone` after `from`, as UTC instants.
fn ticks(when: &When, zone: &str, from: &str, count: usize) -> Vec<String> {
    let zone = TimeZone::get(zone).unwrap();
    let mut after = at(from);
    let mut seen = Vec::new();
    for _ in 0..count {
        after = when.next_after(&zone, after).expect("a next tick");
        seen.push(after.to_string());
    }
    seen
}

#[test]
fn a_daily_time_skipped_by_spring_forward_fires_once_after_the_gap_in_berlin() {
    // 29 March 2026: 02:00 CET becomes 03:00 CEST; 02:30 does not exist.
    let daily = cron("30 2 * * *");
    assert_eq!(
        ticks(&daily, "Europe/Berlin", "2026-03-28T00:00:00Z", 3),
        [
            "2026-03-28T01:30:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-30T00:30:00Z"
        ]
    );
}

#[test]
fn a_daily_time_repeated_by_fall_back_fires_once_at_its_earlier_instant_in_berlin() {
    // 25 October 2026: 03:00 CEST becomes 02:00 CET; 02:30 exists twice.
    let daily = cron("30 2 * * *");
    assert_eq!(
        ticks(&daily, "Europe/Berlin", "2026-10-24T00:00:00Z", 3),
        [
            "2026-10-24T00:30:00Z",
            "2026-10-25T00:30:00Z",
            "2026-10-26T01:30:00Z"
        ]
    );
}

#[test]
fn hourly_ticks_neither_repeat_nor_double_across_berlins_changes() {
    let hourly = cron("0 * * * *");
    // Spring forward: local 02:00 and 03:00 are one instant, fired once.
    assert_eq!(
        ticks(&hourly, "Europe/Berlin", "2026-03-28T22:30:00Z", 4),
        [
            "2026-03-28T23:00:00Z",
            "2026-03-29T00:00:00Z",
            "2026-03-29T01:00:00Z",
            "2026-03-29T02:00:00Z"
        ]
    );
    // Fall back: local 02:00 comes twice and fires at the first; the hour after it has no tick.
    assert_eq!(
        ticks(&hourly, "Europe/Berlin", "2026-10-24T21:30:00Z", 4),
        [
            "2026-10-24T22:00:00Z",
            "2026-10-24T23:00:00Z",
            "2026-10-25T00:00:00Z",
            "2026-10-25T02:00:00Z"
        ]
    );
}

#[test]
fn quarter_hours_across_new_yorks_changes() {
    let quarters = cron("*/15 * * * *");
    // 8 March 2026: 02:00 EST becomes 03:00 EDT; 02:00–02:45 are one tick, at 03:00 EDT.
    assert_eq!(
        ticks(&quarters, "America/New_York", "2026-03-08T06:40:00Z", 3),
        [
            "2026-03-08T06:45:00Z",
            "2026-03-08T07:00:00Z",
            "2026-03-08T07:15:00Z"
        ]
    );
    // 1 November 2026: 02:00 EDT becomes 01:00 EST; 01:00–01:45 fire in their first pass only.
    assert_eq!(
        ticks(&quarters, "America/New_York", "2026-11-01T05:20:00Z", 3),
        [
            "2026-11-01T05:30:00Z",
            "2026-11-01T05:45:00Z",
            "2026-11-01T07:00:00Z"
        ]
    );
}

#[test]
fn a_tick_inside_a_fold_is_not_fired_again_in_its_second_pass() {
    // After the first 01:30 EDT (05:30Z), the next quarter is 01:45 EDT — and after the second
    // 01:30 (EST, 06:30Z) the next is 02:00 EST, not the second 01:45.
    let quarters = cron("*/15 * * * *");
    let zone = TimeZone::get("America/New_York").unwrap();
    let next = |after: &str| quarters.next_after(&zone, at(after)).unwrap().to_string();
    assert_eq!(next("2026-11-01T05:30:00Z"), "2026-11-01T05:45:00Z");
    assert_eq!(next("2026-11-01T06:30:00Z"), "2026-11-01T07:00:00Z");
}

#[test]
fn a_period_ticks_at_its_multiples_since_the_epoch_whatever_the_zone() {
    let every = When::Every(SignedDuration::from_mins(15));
    assert_eq!(
        ticks(&every, "Europe/Berlin", "2026-03-29T00:50:00Z", 3),
        [
            "2026-03-29T01:00:00Z",
            "2026-03-29T01:15:00Z",
            "2026-03-29T01:30:00Z"
        ]
    );
    let utc = TimeZone::UTC;
    assert_eq!(
        every.next_after(&utc, at("2026-03-29T01:00:00Z")),
        Some(at("2026-03-29T01:15:00Z")),
        "strictly after a tick"
    );
    assert_eq!(
        When::Every(SignedDuration::ZERO).next_after(&utc, at("2026-01-01T00:00:00Z")),
        None
    );
}

#[test]
fn names_lists_steps_and_the_either_day_rule() {
    let utc = TimeZone::UTC;
    // Weekdays at 09:00: from Friday 2026-12-04 the next is Monday the 7th.
    let weekdays = cron("0 9 * * MON-FRI");
    assert_eq!(
        weekdays.next_after(&utc, at("2026-12-04T10:00:00Z")),
        Some(at("2026-12-07T09:00:00Z"))
    );
    // Sunday as 7.
    assert_eq!(
        cron("0 0 * * 7").next_after(&utc, at("2026-12-04T00:00:00Z")),
        Some(at("2026-12-06T00:00:00Z"))
    );
    // Day of month and day of week both restricted: either fires (the 13th, or a Friday).
    let either = cron("0 0 13 * FRI");
    assert_eq!(
        ticks(&either, "UTC", "2026-12-05T00:00:00Z", 2),
        ["2026-12-11T00:00:00Z", "2026-12-13T00:00:00Z"]
    );
    // Lists and steps within a range.
    assert_eq!(
        ticks(
            &cron("5,10-20/5 6 * jan,dec *"),
            "UTC",
            "2026-12-31T06:06:00Z",
            4
        ),
        [
            "2026-12-31T06:10:00Z",
            "2026-12-31T06:15:00Z",
            "2026-12-31T06:20:00Z",
            "2027-01-01T06:05:00Z"
        ]
    );
}

#[test]
fn a_date_that_never_comes_gives_no_tick() {
    let never = cron("0 0 30 2 *");
    assert_eq!(
        never.next_after(&TimeZone::UTC, at("2026-01-01T00:00:00Z")),
        None
    );
}

#[test]
fn a_malformed_expression_names_its_field_and_why() {
    let refused = |source: &str| Cron::parse(source).expect_err(source).to_string();
    assert_eq!(
        refused("0 25 * * *"),
        "the hour field `25`: `25` is out of range for the hour field (0–23)"
    );
    assert_eq!(
        refused("* * *"),
        "the expression field `* * *`: a cron expression has five fields (minute hour \
         day-of-month month day-of-week), this one has 3"
    );
    assert_eq!(
        refused("*/0 * * * *"),
        "the minute field `*/0`: the step `0` is not a whole number above 0"
    );
    assert_eq!(
        refused("0 0 * * FUN"),
        "the day-of-week field `FUN`: `FUN` is not a number or one of SUN, MON, TUE, WED, THU, \
         FRI, SAT"
    );
    assert_eq!(
        refused("0 0 10-2 * *"),
        "the day-of-month field `10-2`: the range `10-2` runs backwards"
    );
    let error = Cron::parse("0 0 * 13 *").unwrap_err();
    assert_eq!((error.field, error.text.as_str()), ("month", "13"));
}
