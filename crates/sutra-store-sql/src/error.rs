//! sqlx's errors as the store's, for everything but what the database itself said (which each
//! backend reads in its own terms: SQLite's error kinds, PostgreSQL's SQLSTATE classes).

use sutra_store::Error;

/// A row that does not decode, or a value that does not encode, is a bug: [`Error::Corrupt`].
/// Everything else here (I/O, a closed or exhausted pool, and any database error the backend
/// left to this) is the database being unavailable, and retry-safe because every write is one
/// transaction.
pub fn driver_error(error: sqlx::Error) -> Error {
    match error {
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
