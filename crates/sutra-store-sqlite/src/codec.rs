//! How values cross into SQLite and back: times as INTEGER microseconds (the PostgreSQL store
//! keeps BIGINT the same way), JSON as TEXT, unsigned counters as INTEGER, and sqlx's errors as
//! the store's — a retryable [`Error::Unavailable`] kept apart from [`Error::Corrupt`] bugs.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::error::ErrorKind;
use sutra_core::snapshot::{ParkId, Snapshot};
use sutra_core::step::HistoryKind;
use sutra_store::{Error, Result};

/// Now, to the microsecond the store keeps, so that a record returned from a write equals the
/// record read back later.
pub fn now() -> Timestamp {
    Timestamp::from_microsecond(Timestamp::now().as_microsecond()).expect("now is in range")
}

pub fn micros(at: Timestamp) -> i64 {
    at.as_microsecond()
}

/// `at - duration` in microseconds, saturating: a claim timeout of centuries means "never stale".
pub fn micros_before(at: Timestamp, duration: SignedDuration) -> i64 {
    micros(at).saturating_sub(duration_micros(duration))
}

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

/// An unsigned number as SQLite's signed 64-bit INTEGER.
pub fn signed(value: u64, what: &str) -> Result<i64> {
    i64::try_from(value).map_err(|e| corrupt(what, e))
}

pub fn park(id: ParkId) -> Result<i64> {
    signed(id.0, "a park id")
}

pub fn park_id(value: i64) -> Result<ParkId> {
    u64::try_from(value)
        .map(ParkId)
        .map_err(|e| corrupt("a park id", e))
}

/// A non-negative 64-bit column read as an unsigned number.
pub fn unsigned<T: TryFrom<i64>>(value: i64, what: &str) -> Result<T>
where
    T::Error: std::fmt::Display,
{
    T::try_from(value).map_err(|e| corrupt(what, e))
}

pub fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| corrupt("a JSON column", e))
}

pub fn snapshot(text: &str) -> Result<Snapshot> {
    Snapshot::from_json(json(text)?).map_err(|e| corrupt("a snapshot", e))
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

/// Broken constraints and undecodable rows are bugs; everything else (I/O, a busy or locked
/// database, a closed or exhausted pool) is the database being unavailable, and retry-safe
/// because every write is one transaction.
pub fn db(error: sqlx::Error) -> Error {
    match error {
        sqlx::Error::Database(e) if !matches!(e.kind(), ErrorKind::Other) => {
            Error::Corrupt(e.to_string())
        }
        sqlx::Error::RowNotFound
        | sqlx::Error::TypeNotFound { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Encode(_)
        | sqlx::Error::Decode(_) => Error::Corrupt(error.to_string()),
        other => Error::Unavailable(other.to_string()),
    }
}
