//! How values cross into SQLite and back: times as INTEGER microseconds and unsigned counters as
//! INTEGER, as every SQL backend keeps them ([`sutra_store::codec`], re-exported here), JSON as
//! TEXT (through `sqlx::types::Json`, see `sutra_store_sql::rows`), and sqlx's errors as the
//! store's — a retryable [`Error::Unavailable`] kept apart from [`Error::Corrupt`] bugs.

use jiff::{SignedDuration, Timestamp};
use sqlx::error::ErrorKind;
use sutra_store::Error;
pub use sutra_store::codec::{
    duration_micros, history_kind, micros, park, signed, timestamp, unsigned,
};
use sutra_store_sql::driver_error;

/// `at - duration` in microseconds, saturating: a claim timeout of centuries means "never stale".
pub fn micros_before(at: Timestamp, duration: SignedDuration) -> i64 {
    micros(at).saturating_sub(duration_micros(duration))
}

/// `now + duration`, to the microsecond the store keeps, so that what a worker is told is what a
/// listing reads back; saturating at the end of time.
pub fn later(now: Timestamp, duration: SignedDuration) -> sutra_store::Result<Timestamp> {
    let at = now.saturating_add(duration).unwrap_or(Timestamp::MAX);
    timestamp(micros(at))
}

/// Broken constraints and undecodable rows are bugs; everything else (I/O, a busy or locked
/// database, a closed or exhausted pool) is the database being unavailable
/// ([`driver_error`]).
pub fn db(error: sqlx::Error) -> Error {
    match error {
        sqlx::Error::Database(e) if !matches!(e.kind(), ErrorKind::Other) => {
            Error::Corrupt(e.to_string())
        }
        other => driver_error(other),
    }
}
