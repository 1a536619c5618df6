//! Durations as the API writes them (ISO-8601, `PT1M`), without a date library for one format.

use std::time::Duration;

/// Seconds, with milliseconds when there are any: `PT60S`, `PT0.250S`.
pub(crate) fn iso8601(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match duration.subsec_millis() {
        0 => format!("PT{seconds}S"),
        millis => format!("PT{seconds}.{millis:03}S"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_seconds_and_keeps_milliseconds() {
        assert_eq!(iso8601(Duration::from_secs(60)), "PT60S");
        assert_eq!(iso8601(Duration::from_millis(250)), "PT0.250S");
        assert_eq!(iso8601(Duration::from_millis(1_005)), "PT1.005S");
        assert_eq!(iso8601(Duration::ZERO), "PT0S");
    }
}
