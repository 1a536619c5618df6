//! How every SQL backend keeps the store's values, written once so that SQLite and PostgreSQL
//! cannot drift apart: times as 64-bit microseconds since the epoch, unsigned counters as signed
//! 64-bit integers, park ids as integers, history kinds by their API names. A value that does not
//! fit is [`Error::Corrupt`]: a bug or a manual edit, never something a retry fixes.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sutra_core::snapshot::ParkId;
use sutra_core::step::HistoryKind;

use crate::{Error, Result};

pub fn micros(at: Timestamp) -> i64 {
    at.as_microsecond()
}

/// A duration in microseconds, saturating: a claim timeout of centuries means "never stale".
pub fn duration_micros(duration: SignedDuration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(if duration.is_negative() {
        i64::MIN
    } else {
        i64::MAX
    })
}

pub fn timestamp(micros: i64) -> Result<Timestamp> {
    Timestamp::from_microsecond(micros).map_err(|e| corrupt("a time", e))
}

/// An unsigned number as a signed 64-bit column.
pub fn signed(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|e| corrupt(what, e))
}

pub fn park(id: ParkId) -> Result<i64> {
    signed(id.0, "a park id")
}

pub fn park_id(value: i64) -> Result<ParkId> {
    unsigned(value, "a park id").map(ParkId)
}

/// A non-negative 64-bit column read as an unsigned number.
pub fn unsigned<T: TryFrom<i64>>(value: i64, what: &str) -> Result<T>
where
    T::Error: std::fmt::Display,
{
    T::try_from(value).map_err(|e| corrupt(what, e))
}

/// The name serde gives the kind (`message_received`), so that the column reads as the API does.
pub fn history_kind(kind: HistoryKind) -> String {
    match serde_json::to_value(kind) {
        Ok(Value::String(name)) => name,
        other => unreachable!("a history kind serializes as its name, not {other:?}"),
    }
}

pub fn parse_history_kind(name: &str) -> Result<HistoryKind> {
    serde_json::from_value(Value::String(name.to_owned())).map_err(|e| corrupt("a history kind", e))
}

pub fn corrupt(what: &str, error: impl std::fmt::Display) -> Error {
    Error::Corrupt(format!("{what}: {error}"))
}
