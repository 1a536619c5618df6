//! When a schedule fires (issue 34, `docs/design/time-and-undo.md` §2.1): a five-field cron
//! expression read in a time zone, or a fixed period, and the next tick after an instant.
//!
//! Pure: no clock. A tick is computed from the previous one, so every replica and every
//! redeploy computes the same ticks, and a tick's instant can name the start it makes.
//!
//! Daylight-saving time, in the schedule's zone: a local time that does not exist (the hour a
//! spring-forward skips) fires once, at the first instant after the gap; a local time that
//! exists twice (the hour a fall-back repeats) fires once, at its earlier instant. Several
//! local times in one gap fire once.

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{SignedDuration, Timestamp};

/// How far ahead the next tick is looked for: an expression that matches no date within it
/// (such as the 30th of February) never fires, and the checker refuses it.
const HORIZON_DAYS: u32 = 5 * 366;

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum When {
    Cron(Cron),
    /// At every multiple of the period since the Unix epoch, in UTC: the ticks do not depend on
    /// when the schedule was deployed.
    Every(SignedDuration),
}

/// A parsed five-field cron expression: minute, hour, day of month, month, day of week.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    /// Bits 1–31.
    days: u32,
    /// Bits 1–12.
    months: u16,
    /// Bits 0–6, Sunday 0.
    weekdays: u8,
    /// Whether day of month and day of week are both restricted (neither starts with `*`):
    /// then a date matching either fires, as in every cron since Vixie's.
    either_day: bool,
    source: String,
}

/// A cron expression that does not parse: which field, its text, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the {field} field `{text}`: {why}")]
pub struct CronError {
    pub field: &'static str,
    pub text: String,
    pub why: String,
}

/// One field's name, range and names.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day-of-month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    },
    // 7 is Sunday too; names count from Sunday, 0.
    Field {
        name: "day-of-week",
        min: 0,
        max: 7,
        names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    },
];

impl Cron {
    pub fn parse(source: &str) -> Result<Cron, CronError> {
        let parts: Vec<&str> = source.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = parts[..] else {
            return Err(CronError {
                field: "expression",
                text: source.to_owned(),
                why: format!(
                    "a cron expression has five fields (minute hour day-of-month month \
                     day-of-week), this one has {}",
                    parts.len()
                ),
            });
        };
        let bits = |index: usize, text: &str| field_bits(&FIELDS[index], text);
        let weekdays = bits(4, weekday)?;
        Ok(Cron {
            minutes: bits(0, minute)?,
            hours: bits(1, hour)? as u32,
            days: bits(2, day)? as u32,
            months: bits(3, month)? as u16,
            // Sunday as 7 is Sunday as 0.
            weekdays: ((weekdays | weekdays >> 7) & 0x7f) as u8,
            either_day: !day.starts_with('*') && !weekday.starts_with('*'),
            source: source.to_owned(),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn matches_date(&self, date: Date) -> bool {
        let on = |bits: u64, n: i8| bits >> n & 1 == 1;
        if !on(u64::from(self.months), date.month()) {
            return false;
        }
        let by_day = on(u64::from(self.days), date.day());
        let weekday = date.weekday().to_sunday_zero_offset();
        let by_weekday = on(u64::from(self.weekdays), weekday);
        if self.either_day {
            by_day || by_weekday
        } else {
            by_day && by_weekday
        }
    }

    /// The local times of a day this expression fires at, in order.
    fn times(&self) -> impl Iterator<Item = (i8, i8)> + '_ {
        let hours = (0..24i8).filter(|h| self.hours >> h & 1 == 1);
        hours.flat_map(|h| {
            (0..60i8)
                .filter(|m| self.minutes >> m & 1 == 1)
                .map(move |m| (h, m))
        })
    }
}

/// The bits of one field: `*`, `n`, `a-b`, `*/s`, `a-b/s`, `a/s`, and lists of those.
fn field_bits(field: &Field, text: &str) -> Result<u64, CronError> {
    let error = |why: String| CronError {
        field: field.name,
        text: text.to_owned(),
        why,
    };
    let mut bits = 0u64;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => {
                let step: u32 = step.parse().ok().filter(|s| *s > 0).ok_or_else(|| {
                    error(format!("the step `{step}` is not a whole number above 0"))
                })?;
                (range, step)
            }
            None => (part, 1),
        };
        let (low, high) = match range {
            "*" => (field.min, field.max),
            _ => match range.split_once('-') {
                Some((low, high)) => (
                    value(field, low).map_err(error)?,
                    value(field, high).map_err(error)?,
                ),
                // `a/s` runs from `a` to the field's end.
                None if part.contains('/') => (value(field, range).map_err(error)?, field.max),
                None => {
                    let single = value(field, range).map_err(error)?;
                    (single, single)
                }
            },
        };
        if low > high {
            return Err(error(format!("the range `{range}` runs backwards")));
        }
        for n in (low..=high).step_by(step as usize) {
            bits |= 1 << n;
        }
    }
    Ok(bits)
}

/// One value of a field: a number in its range, or one of its names.
fn value(field: &Field, text: &str) -> Result<u32, String> {
    let named = (field.names.iter()).position(|name| name.eq_ignore_ascii_case(text));
    let number = match named {
        Some(index) => index as u32 + field.min,
        None => text.parse::<u32>().map_err(|_| match field.names {
            [] => format!("`{text}` is not a number"),
            names => format!("`{text}` is not a number or one of {}", names.join(", ")),
        })?,
    };
    if !(field.min..=field.max).contains(&number) {
        return Err(format!(
            "`{text}` is out of range for the {} field ({}–{})",
            field.name, field.min, field.max
        ));
    }
    Ok(number)
}

impl When {
    /// How many times a minute it ticks at most: a period's 60 s over its length; a cron's
    /// finest field is the minute, so once.
    pub fn ticks_per_minute(&self) -> f64 {
        match self {
            When::Every(period) => 60.0 / period.as_secs_f64().max(f64::MIN_POSITIVE),
            When::Cron(_) => 1.0,
        }
    }

    /// The first tick strictly after `after`, in `zone` (which a period ignores); `None` when
    /// none comes within five years.
    pub fn next_after(&self, zone: &TimeZone, after: Timestamp) -> Option<Timestamp> {
        match self {
            When::Every(period) => next_period(*period, after),
            When::Cron(cron) => next_cron(cron, zone, after),
        }
    }
}

fn next_period(period: SignedDuration, after: Timestamp) -> Option<Timestamp> {
    let period = period.as_nanos();
    if period <= 0 {
        return None;
    }
    let ticks = after.as_nanosecond().div_euclid(period) + 1;
    Timestamp::from_nanosecond(ticks.checked_mul(period)?).ok()
}

fn next_cron(cron: &Cron, zone: &TimeZone, after: Timestamp) -> Option<Timestamp> {
    let start = zone.to_datetime(after);
    // The minute `after` falls in: a tick at that minute may still be ahead of it in a fold.
    let floor = start.date().at(start.hour(), start.minute(), 0, 0);
    let mut date = start.date();
    for _ in 0..HORIZON_DAYS {
        if cron.matches_date(date) {
            for (hour, minute) in cron.times() {
                let local = date.at(hour, minute, 0, 0);
                if local < floor {
                    continue;
                }
                let instant = instant_of(zone, local)?;
                if instant > after {
                    return Some(instant);
                }
            }
        }
        date = date.tomorrow().ok()?;
    }
    None
}

/// The instant a local time fires at in `zone`: itself; in a gap, the first instant after the
/// gap; in a fold, the earlier of its two instants.
fn instant_of(zone: &TimeZone, local: DateTime) -> Option<Timestamp> {
    let ambiguous = zone.to_ambiguous_timestamp(local);
    match ambiguous.offset() {
        AmbiguousOffset::Gap { after, .. } => {
            // `local` read in the offset after the gap lies before the transition that opens it.
            let before_gap = after.to_timestamp(local).ok()?;
            zone.following(before_gap)
                .next()
                .map(|transition| transition.timestamp())
        }
        AmbiguousOffset::Unambiguous { .. } | AmbiguousOffset::Fold { .. } => {
            ambiguous.earlier().ok()
        }
    }
}
