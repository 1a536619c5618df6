//! `start: { schedule }`: a flow whose instances a schedule starts, at the ticks of a cron
//! expression read in a time zone or of a fixed period (issue 34; when a tick fires is
//! `crate::schedule`'s, what firing does is the runtime's).

use jiff::Timestamp;
use jiff::tz::{self, TimeZone};
use serde_json::{Map, Value as Json};

use crate::diagnostic::{Diagnostic, did_you_mean};
use crate::expr::Template;
use crate::model::{CatchUp, Overlap, Schedule};
use crate::schedule::{Cron, When};
use crate::yaml::{Entry, Node};

use super::reader::{Checker, Record};

const FIELDS: &[&str] = &["cron", "every", "timezone", "overlap", "catch-up", "input"];

const EXAMPLE: &str = "{ cron: \"0 2 * * *\", timezone: Europe/Berlin }";

/// The roots a schedule's `input` sees: the tick's instant, RFC 3339 in UTC.
const INPUT_ROOTS: &[&str] = &["tick"];

/// The cron fields in order, as `CronError::field` names them.
const CRON_FIELDS: [&str; 5] = ["minute", "hour", "day-of-month", "month", "day-of-week"];

const CRON_HINT: &str = "a cron expression is five fields, in order: minute (0–59), hour (0–23), \
                         day-of-month (1–31), month (1–12 or JAN–DEC) and day-of-week (0–7 or \
                         SUN–SAT, Sunday being 0 or 7); `0 2 * * *` is 02:00 every day";

/// The `schedule` of a flow's `start`.
pub(super) fn read(cx: &mut Checker, entry: &Entry, flow: &str) -> Option<Schedule> {
    let what = format!("the `schedule` of flow `{flow}`");
    let record = cx.record(&entry.value, what, entry.key_span, EXAMPLE)?;
    cx.unknown_fields(&record, FIELDS);
    let when = when(cx, &record);
    let zone = record
        .get("timezone")
        .map_or(Some(("UTC".to_owned(), TimeZone::UTC)), |node| {
            zone(cx, node, &record.label("timezone"))
        });
    if let (Some(when @ When::Cron(cron)), Some(node)) = (&when, record.get("cron")) {
        let utc = TimeZone::UTC;
        let in_zone = zone.as_ref().map_or(&utc, |(_, zone)| zone);
        if when.next_after(in_zone, Timestamp::UNIX_EPOCH).is_none() {
            never_fires(cx, cron, node, &record.label("cron"));
        }
    }
    let overlap = record.get("overlap").map_or(Some(Overlap::Skip), |node| {
        let options = [("skip", Overlap::Skip), ("allow", Overlap::Allow)];
        cx.keyword(node, &record.label("overlap"), &options)
    });
    let catch_up = record.get("catch-up").map_or(Some(CatchUp::One), |node| {
        let options = [("none", CatchUp::None), ("one", CatchUp::One)];
        cx.keyword(node, &record.label("catch-up"), &options)
    });
    let input = record.get("input").map_or_else(
        || Some(Template::Literal(Json::Object(Map::new()))),
        |node| cx.template(node, &record.label("input"), INPUT_ROOTS),
    );
    let (zone_name, zone) = zone?;
    Some(Schedule {
        when: when?,
        zone_name,
        zone,
        overlap: overlap?,
        catch_up: catch_up?,
        input: input?,
    })
}

/// Exactly one of `cron` and `every`.
fn when(cx: &mut Checker, record: &Record) -> Option<When> {
    match (record.entry("cron"), record.entry("every")) {
        (Some(cron), None) => self::cron(cx, &cron.value, &record.label("cron")).map(When::Cron),
        (None, Some(every)) => self::every(cx, &every.value, &record.label("every")),
        (Some(cron), Some(every)) => {
            let later = if cron.key_span.index > every.key_span.index {
                cron
            } else {
                every
            };
            cx.report(
                Diagnostic::error(
                    "cron-and-every",
                    later.key_span,
                    format!("{} has both `cron` and `every`", record.what),
                )
                .with_hint(
                    "a schedule fires by one rule: keep `cron` (times of day and dates) or \
                     `every` (a fixed period)",
                ),
            );
            None
        }
        (None, None) => {
            cx.report(
                Diagnostic::error(
                    "schedule-without-when",
                    record.at,
                    format!("{} says neither when nor how often it fires", record.what),
                )
                .with_hint(
                    "add `cron: \"0 2 * * *\"` (a five-field cron expression) or `every: PT15M` \
                     (a fixed period)",
                ),
            );
            None
        }
    }
}

fn cron(cx: &mut Checker, node: &Node, label: &str) -> Option<Cron> {
    let text = cx.text(node, label)?;
    Cron::parse(text)
        .map_err(|error| {
            // The field at fault, when the expression has its five.
            let at = CRON_FIELDS
                .iter()
                .position(|field| *field == error.field)
                .and_then(|index| word(text, index))
                .map_or(node.span, |(offset, length)| {
                    cx.within(node.span, text, offset, length)
                });
            cx.report(
                Diagnostic::error(
                    "invalid-cron",
                    at,
                    format!("{label} is not a valid cron expression: {error}"),
                )
                .with_hint(CRON_HINT),
            );
        })
        .ok()
}

/// The char offset and char length of the `index`th whitespace-separated word of `text`.
fn word(text: &str, index: usize) -> Option<(usize, usize)> {
    let mut words = Vec::new();
    let mut start = None;
    let mut end = 0;
    for (at, c) in text.chars().enumerate() {
        end = at + 1;
        match (c.is_whitespace(), start) {
            (true, Some(first)) => {
                words.push((first, at - first));
                start = None;
            }
            (false, None) => start = Some(at),
            _ => {}
        }
    }
    if let Some(first) = start {
        words.push((first, end - first));
    }
    words.get(index).copied()
}

fn every(cx: &mut Checker, node: &Node, label: &str) -> Option<When> {
    let hint = "write `PT1S` or longer: a schedule fires at most once a second, each tick the \
                work of one replica, not of a busy loop";
    cx.period(node, label, hint).map(When::Every)
}

/// The zone and its IANA name as the database spells it (`europe/berlin` is `Europe/Berlin`).
fn zone(cx: &mut Checker, node: &Node, label: &str) -> Option<(String, TimeZone)> {
    let text = cx.text(node, label)?;
    let name = text.trim();
    let found = TimeZone::get(name)
        .ok()
        .and_then(|zone| Some((zone.iana_name()?.to_owned(), zone)));
    if found.is_none() {
        let names: Vec<String> = tz::db()
            .available()
            .map(|name| name.as_str().to_owned())
            .collect();
        let hint = match did_you_mean(name, names.iter().map(String::as_str)) {
            Some(close) => format!("did you mean `{close}`?"),
            None => "write an IANA time zone name, such as `Europe/Berlin` or `UTC`".to_owned(),
        };
        cx.report(
            Diagnostic::error(
                "unknown-timezone",
                node.span,
                format!("{label}: `{name}` is not a time zone of the IANA database"),
            )
            .with_hint(hint),
        );
    }
    found
}

/// A cron expression that names no date that exists (the 30th of February). The next tick is
/// looked for from a fixed instant, so that the verdict does not depend on when the document is
/// checked.
fn never_fires(cx: &mut Checker, cron: &Cron, node: &Node, label: &str) {
    cx.report(
        Diagnostic::error(
            "cron-never-fires",
            node.span,
            format!(
                "{label} never fires: `{}` matches no date within five years",
                cron.source().trim()
            ),
        )
        .with_hint(
            "its day-of-month and month fields must name a date that exists, such as \
             `0 0 28 2 *` (the 28th of February) rather than `0 0 30 2 *`",
        ),
    );
}
