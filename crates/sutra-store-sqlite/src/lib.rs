//! Sutra's embedded store: the store seam over one SQLite file (`sutra serve`'s default), or over
//! a throwaway in-memory database (`sqlite::memory:`).
//!
//! [`SqliteStore`] is `sutra_store_sql`'s [`SqlStore`], whose scripts implement every area of the
//! seam once, over the statements of this crate: its SQL, its codec, its schema and its unit of
//! work ([`statements::Session`]). Each operation is one statement or one transaction. SQLite has
//! one writer at a time, so every write transaction takes the write lock up front (`BEGIN
//! IMMEDIATE`, see [`statements::Session::write`]) and waits up to the busy timeout for it; the
//! claim, release, sweep and delivery updates are single conditional statements, atomic on their
//! own, and run outside any transaction. Times are INTEGER microseconds and JSON is TEXT (see
//! [`codec`]), as the PostgreSQL store keeps them.
//!
//! One file per area of the seam, each with the statements of its area, each statement's SQL
//! beside the binding of its parameters: [`claim`] first, then
//! [`commit`], [`intake`], [`deliveries`], [`tasks`], [`outbox`], [`leases`], [`deployments`],
//! [`reads`], [`purge`] and [`schedules`].

mod claim;
mod codec;
mod commit;
mod deliveries;
mod deployments;
mod holdings;
mod intake;
mod leases;
mod outbox;
mod purge;
mod reads;
mod scaling;
mod schedules;
mod statements;
mod tasks;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sutra_store::{Clock, Error, Result};
use sutra_store_sql::SqlStore;

use crate::codec::db;
use crate::holdings::Holdings;

/// The schema, embedded in the binary and applied by [`open`].
static MIGRATOR: Migrator = sqlx::migrate!();

/// How long a writer waits for another's transaction before the store reports itself
/// unavailable. Steps take milliseconds; this is far beyond any healthy wait.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The embedded store.
pub type SqliteStore = SqlStore<Sqlite>;

/// The SQLite backend: a pool of connections to one database, and the clock its rows' times are
/// read from (the process's: SQLite has no clock of its own worth the name).
pub struct Sqlite {
    pool: SqlitePool,
    clock: Clock,
    /// What this process's open write transactions have claimed ([`holdings`]).
    holdings: Arc<Holdings>,
}

/// Opens `sqlite://path.db` or `sqlite:path.db` (creating the file if missing), or a new, empty
/// database for `sqlite::memory:` (each call its own), and brings the schema up to date. Its
/// times are the system clock's.
pub async fn open(url: &str) -> Result<SqliteStore> {
    open_with(url, Clock::system()).await
}

/// [`open`], with every time the store reads taken from `clock`: the engine's, so that a test
/// advancing a manual clock moves the store's claims, locks and due times with it.
pub async fn open_with(url: &str, clock: Clock) -> Result<SqliteStore> {
    let options = SqliteConnectOptions::from_str(url)
        .map_err(|e| Error::Unavailable(format!("`{url}` is not a SQLite URL: {e}")))?
        .foreign_keys(true);
    let pool = if is_in_memory(url) {
        memory_pool(options).await
    } else {
        file_pool(options).await
    }
    .map_err(db)?;
    MIGRATOR.run(&pool).await.map_err(migration_failed)?;
    Ok(SqlStore::new(Sqlite {
        pool,
        clock,
        holdings: Arc::default(),
    }))
}

impl Sqlite {
    /// Waits for every connection to close. An in-memory database is gone after.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Reads the URL the way sqlx does: sqlx's options have no getter for it, and their
/// `to_url_lossy` panics on the name sqlx gives a `:memory:` database.
fn is_in_memory(url: &str) -> bool {
    let rest = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let (database, params) = rest.split_once('?').unwrap_or((rest, ""));
    database == ":memory:" || params.split('&').any(|param| param == "mode=memory")
}

/// An in-memory database lives only while a connection to it is open, so the pool keeps exactly
/// one, forever. One connection also means shared-cache table locks never contend: those fail
/// at once with `SQLITE_LOCKED`, which no busy timeout waits out.
async fn memory_pool(options: SqliteConnectOptions) -> sqlx::Result<SqlitePool> {
    SqlitePoolOptions::new()
        .min_connections(1)
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await
}

/// WAL lets readers run beside the writer; `synchronous = NORMAL` under WAL is durable against
/// a crash of the process (only a power loss can drop the last commits), which is the embedded
/// store's promise.
async fn file_pool(options: SqliteConnectOptions) -> sqlx::Result<SqlitePool> {
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT);
    SqlitePoolOptions::new().connect_with(options).await
}

/// A schema this build does not know (migrated by a newer Sutra, or edited by hand) is not
/// something a retry fixes.
fn migration_failed(error: MigrateError) -> Error {
    match error {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => db(e),
        other => Error::Corrupt(format!("the database schema: {other}")),
    }
}
