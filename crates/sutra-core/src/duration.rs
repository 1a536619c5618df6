//! ISO-8601 durations (`PT30S`, `PT1H30M`, `P1D`), as deployment documents and the API write them.
//!
//! A day is taken to be 24 hours: durations here are timer delays, not calendar arithmetic.
//! Months and years are refused because they have no fixed length, and negative durations because
//! no delay can be negative. Whether zero makes sense is the caller's call.

use jiff::fmt::temporal::SpanParser;
use jiff::{SignedDuration, SpanRelativeTo};

/// Why a text is not a duration this crate accepts. The text is part of the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("`{0}` is not an ISO-8601 duration")]
    NotIso(String),
    #[error("`{0}` counts months or years, which have no fixed length")]
    Calendar(String),
    #[error("`{0}` is negative")]
    Negative(String),
    #[error("`{0}` is too long")]
    TooLong(String),
}

impl DurationError {
    /// How to write it instead.
    pub fn hint(&self) -> &'static str {
        match self {
            DurationError::NotIso(_) => {
                "write an ISO-8601 duration such as PT30S (30 seconds), PT5M, PT1H30M or P1D"
            }
            DurationError::Calendar(_) => "count in days or weeks instead, such as P30D or P4W",
            DurationError::Negative(_) => "write a positive duration such as PT30S",
            DurationError::TooLong(_) => "write a duration of at most a few thousand years",
        }
    }
}

/// The most whole hours a duration may count: jiff's bound on a span's hours, about 20,000
/// years. Each unit of a span is bounded alone, so `P8W88888DT878855968H` (100,000 years) read
/// as a span; written back as Sutra writes durations, in hours (`PT880990624H`), it would not
/// read again. So the whole is held to the bound of its largest single unit.
const HOURS_MAX: i64 = 175_307_616;

/// Parses an ISO-8601 duration such as `PT30S` or `P1D`.
pub fn parse_duration(text: &str) -> Result<SignedDuration, DurationError> {
    static PARSER: SpanParser = SpanParser::new();
    let span = PARSER
        .parse_span(text.trim())
        .map_err(|_| DurationError::NotIso(text.to_owned()))?;
    if span.get_years() != 0 || span.get_months() != 0 {
        return Err(DurationError::Calendar(text.to_owned()));
    }
    if span.is_negative() {
        return Err(DurationError::Negative(text.to_owned()));
    }
    let too_long = || DurationError::TooLong(text.to_owned());
    let duration = span
        .to_duration(SpanRelativeTo::days_are_24_hours())
        .map_err(|_| too_long())?;
    if duration.as_hours() > HOURS_MAX {
        return Err(too_long());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_iso_8601_with_days_of_24_hours() {
        assert_eq!(parse_duration("PT30S"), Ok(SignedDuration::from_secs(30)));
        assert_eq!(
            parse_duration("PT1H30M"),
            Ok(SignedDuration::from_secs(5400))
        );
        assert_eq!(parse_duration("P1D"), Ok(SignedDuration::from_hours(24)));
        assert_eq!(parse_duration("P1W"), Ok(SignedDuration::from_hours(168)));
        assert_eq!(
            parse_duration("PT0.5S"),
            Ok(SignedDuration::from_millis(500))
        );
        assert_eq!(parse_duration("PT0S"), Ok(SignedDuration::ZERO));
    }

    #[test]
    fn refuses_other_notations() {
        for text in ["30s", "1 day", "PT", "P", "", "5"] {
            assert_eq!(
                parse_duration(text),
                Err(DurationError::NotIso(text.to_owned())),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_months_years_and_negative_durations() {
        assert!(matches!(
            parse_duration("P1M"),
            Err(DurationError::Calendar(_))
        ));
        assert!(matches!(
            parse_duration("P1Y"),
            Err(DurationError::Calendar(_))
        ));
        assert!(matches!(
            parse_duration("-PT1S"),
            Err(DurationError::Negative(_))
        ));
    }

    #[test]
    fn refuses_durations_out_of_range() {
        assert!(parse_duration("P99999999999D").is_err());
        assert!(parse_duration("P7304484D").is_ok());
    }

    /// Found by the `duration` fuzz target (decision 0042): each unit of the span was in range,
    /// their sum was not, and its rendering in hours was refused.
    #[test]
    fn a_duration_it_reads_reads_again_as_sutra_writes_it() {
        assert!(matches!(
            parse_duration("P8w88888DT878855968.576H"),
            Err(DurationError::TooLong(_))
        ));
        for text in [
            "PT175307616H59M59.999999999S",
            "P7304484D",
            "P1043497W",
            "P2W3DT4H5M6.7S",
        ] {
            let duration = parse_duration(text).unwrap();
            assert_eq!(
                parse_duration(&duration.to_string()),
                Ok(duration),
                "{text}"
            );
        }
    }
}
