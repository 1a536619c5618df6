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

/// A store whose tenants' and system's work run as two roles, as decision 0040 recommends: a
/// system path that ran as the serving role would see no row, and its test would fail.
async fn fresh() -> Fixture {
    let database = TestDatabase::create().await;
    let options = PostgresOptions {
        system_url: Some(database.system_url().to_owned()),
        ..PostgresOptions::default()
    };
    let store = sutra_store_postgres::open(database.serving_url(), &options)
        .await
        .expect("a fresh database opens and migrates");
    Fixture {
        store,
        _database: database,
    }
}

sutra_store::conformance_tests!(fresh());
