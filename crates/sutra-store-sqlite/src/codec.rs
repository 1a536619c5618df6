//! How values cross into SQLite and back: times as INTEGER microseconds and unsigned counters as
//! INTEGER, as every SQL backend keeps them ([`sutra_store::codec`], re-exported here), JSON as
//! TEXT, and sqlx's errors as the store's — a retryable [`Error::Unavailable`] kept apart from
//! [`Error::Corrupt`] bugs.

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::error::ErrorKind;
use sutra_core::snapshot::Snapshot;
pub use sutra_store::codec::{
    corrupt, duration_micros, history_kind, micros, park, park_id, parse_history_kind, signed,
    timestamp, unsigned,
};
use sutra_store::{Error, Result};

/// Now, to the microsecond the store keeps, so that a record returned from a write equals the
/// record read back later.
pub fn now() -> Timestamp {
    Timestamp::from_microsecond(Timestamp::now().as_microsecond()).expect("now is in range")
}

/// `at - duration` in microseconds, saturating: a claim timeout of centuries means "never stale".
pub fn micros_before(at: Timestamp, duration: SignedDuration) -> i64 {
    micros(at).saturating_sub(duration_micros(duration))
}

pub fn json(text: &str) -> Result<Value> {
    serde_json::from_str(text).map_err(|e| corrupt("a JSON column", e))
}

pub fn snapshot(text: &str) -> Result<Snapshot> {
    Snapshot::from_json(json(text)?).map_err(|e| corrupt("a snapshot", e))
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
