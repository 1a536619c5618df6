//! The store conformance suite, run against both kinds of SQLite database `sutra serve` opens:
//! a file (in WAL mode, with a pool of connections) and `sqlite::memory:` (one connection).
//! Each test gets its own database.

use std::ops::Deref;

use sutra_store_sqlite::SqliteStore;
use tempfile::TempDir;

/// A store, and the directory of its database file, deleted when the test ends.
struct Fixture {
    store: SqliteStore,
    _dir: Option<TempDir>,
}

impl Deref for Fixture {
    type Target = SqliteStore;

    fn deref(&self) -> &SqliteStore {
        &self.store
    }
}

async fn file_store() -> Fixture {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let url = format!("sqlite://{}", dir.path().join("sutra.db").display());
    let store = sutra_store_sqlite::open(&url)
        .await
        .expect("a file database opens");
    Fixture {
        store,
        _dir: Some(dir),
    }
}

async fn memory_store() -> Fixture {
    let store = sutra_store_sqlite::open("sqlite::memory:")
        .await
        .expect("a memory database opens");
    Fixture { store, _dir: None }
}

mod file {
    sutra_store::conformance_tests!(super::file_store());
}

mod memory {
    sutra_store::conformance_tests!(super::memory_store());
}
