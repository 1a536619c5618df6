//! The store conformance suite on PostgreSQL, each test on a fresh database of its own (see
//! `sutra_testkit::postgres`), connected as the engine's ordinary role so that row-level
//! security is in force throughout.

use std::ops::Deref;

use sutra_store_postgres::{PostgresOptions, PostgresStore};
use sutra_testkit::postgres::TestDatabase;

/// A store, and its database, dropped when the test ends.
struct Fixture {
    store: PostgresStore,
    _database: TestDatabase,
}

impl Deref for Fixture {
    type Target = PostgresStore;

    fn deref(&self) -> &PostgresStore {
        &self.store
    }
}

async fn fresh() -> Fixture {
    let database = TestDatabase::create().await;
    let store = sutra_store_postgres::open(database.url(), &PostgresOptions::default())
        .await
        .expect("a fresh database opens and migrates");
    Fixture {
        store,
        _database: database,
    }
}

sutra_store::conformance_tests!(fresh());
