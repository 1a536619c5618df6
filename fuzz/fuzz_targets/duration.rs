//! An ISO-8601 duration, as deployment documents (`wait`, `timeout`, task locks) and the task
//! API (`lock`, `wait`) write them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sutra_core::duration::parse_duration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match parse_duration(text) {
        Ok(duration) => {
            assert!(!duration.is_negative(), "{text:?} read as {duration}");
            // Written back as Sutra writes durations (a snapshot's task lock and backoff), it
            // reads the same, both here and as a snapshot reads it.
            let written = duration.to_string();
            assert_eq!(parse_duration(&written), Ok(duration), "{text:?}");
            let reread = written.parse::<jiff::SignedDuration>().ok();
            assert_eq!(reread, Some(duration), "{text:?}");
        }
        Err(error) => {
            let _ = (error.to_string(), error.hint());
        }
    }
});
