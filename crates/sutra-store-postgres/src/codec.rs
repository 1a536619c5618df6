//! How values cross into PostgreSQL and back: times as BIGINT microseconds and unsigned counters as
//! BIGINT, as every SQL backend keeps them ([`sutra_store::codec`], re-exported here), JSON as
//! JSONB (through `sqlx::types::Json`, see `sutra_store_sql::rows`), and sqlx's errors as the
//! store's — a retry-safe [`Error::Unavailable`] kept apart from [`Error::Corrupt`] bugs, decided
//! by the SQLSTATE class rather than by reading messages.

use jiff::SignedDuration;
use sutra_store::Error;
pub use sutra_store::codec::{
    duration_micros, history_kind, micros, park, signed, timestamp, unsigned,
};
use sutra_store_sql::driver_error;

/// A duration as a non-negative age in microseconds, for `sutra_now() - age`: a negative
/// timeout would make every claim stale at once, and the subtraction must not overflow.
pub fn age(duration: SignedDuration) -> i64 {
    duration_micros(duration).max(0)
}

/// SQLSTATE classes that say the database could not do the work now, not that the work is wrong:
/// connection exceptions (08), transaction rollbacks — serialization failures and deadlocks —
/// (40), insufficient resources (53), a lock not obtained in time (55), an operator intervening
/// or the server shutting down or restarting (57), system I/O errors (58). Every write is one
/// transaction, so any of them is retry-safe.
const RETRYABLE_CLASSES: [&str; 6] = ["08", "40", "53", "55", "57", "58"];

/// A transaction killed for idling while it held locks (a frozen replica): retry-safe too.
const IDLE_IN_TRANSACTION_TIMEOUT: &str = "25P03";

/// A write refused because the server is a standby (`read_only_sql_transaction`): the primary
/// this connection was opened to has been demoted, and the store's watcher points its pools at
/// the new one (see `failover`), so the write is retry-safe.
const READ_ONLY_TRANSACTION: &str = "25006";

/// Broken constraints (a repeated history sequence, another tenant's row), malformed data and
/// undecodable rows are bugs: [`Error::Corrupt`]. Everything the database or the network refused
/// for now (connections, the pool, I/O, serialization failures, lock and idle timeouts) is
/// [`Error::Unavailable`].
pub fn db(error: sqlx::Error) -> Error {
    match error {
        sqlx::Error::Database(e) => {
            let code = e.code().unwrap_or_default();
            let retryable = code == IDLE_IN_TRANSACTION_TIMEOUT
                || code == READ_ONLY_TRANSACTION
                || RETRYABLE_CLASSES
                    .iter()
                    .any(|class| code.starts_with(class));
            if retryable {
                Error::Unavailable(e.to_string())
            } else {
                Error::Corrupt(format!("{e} (SQLSTATE {code})"))
            }
        }
        other => driver_error(other),
    }
}
