//! What `SqliteStore::open` promises beyond the store trait: the URL forms `sutra serve`
//! accepts, a file database that survives the process, migrations that apply once, and
//! in-memory databases that are each their own.

use sutra_core::snapshot::{InstanceInfo, Snapshot};
use sutra_store::StepCommit;
use sutra_store::prelude::*;
use sutra_store_sqlite::SqliteStore;

const TENANT: &str = "acme";

fn start(id: &str) -> StepCommit {
    StepCommit {
        claim: None,
        snapshot: Snapshot::new(InstanceInfo {
            id: id.to_owned(),
            tenant: TENANT.to_owned(),
            deployment: "payments".to_owned(),
            version: 1,
            flow: "money-transfer".to_owned(),
        }),
        history: Vec::new(),
        arms: Vec::new(),
        disarms: Vec::new(),
        outbox: Vec::new(),
        taken: None,
        inbox: None,
    }
}

async fn has_instance(store: &SqliteStore, id: &str) -> bool {
    store.instance(TENANT, id).await.unwrap().is_some()
}

#[tokio::test]
async fn a_file_database_survives_reopening_and_migrates_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested-name.db");
    let url = format!("sqlite://{}", path.display());
    let store = SqliteStore::open(&url).await.unwrap();
    store.commit(&start("i-1")).await.unwrap();
    store
        .deploy(TENANT, "payments", "name: payments")
        .await
        .unwrap();
    store.close().await;

    // Opening again runs the migrator over an up-to-date schema: it must change nothing.
    let reopened = SqliteStore::open(&url).await.unwrap();

    assert!(has_instance(&reopened, "i-1").await);
    assert_eq!(reopened.deployments(Some(TENANT)).await.unwrap().len(), 1);
    reopened.close().await;
}

#[tokio::test]
async fn both_url_forms_name_a_file_created_if_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short-form.db");
    assert!(!path.exists());

    let store = SqliteStore::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    store.commit(&start("i-1")).await.unwrap();
    store.close().await;

    assert!(path.exists());
    let long_form = SqliteStore::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(has_instance(&long_form, "i-1").await);
}

#[tokio::test]
async fn every_memory_database_is_its_own() {
    let first = SqliteStore::open("sqlite::memory:").await.unwrap();
    let second = SqliteStore::open("sqlite::memory:").await.unwrap();

    first.commit(&start("i-1")).await.unwrap();

    assert!(has_instance(&first, "i-1").await);
    assert!(!has_instance(&second, "i-1").await);
}

#[tokio::test]
async fn a_malformed_url_is_refused() {
    let outcome = SqliteStore::open("sqlite://db?mode=bogus").await;
    assert!(matches!(outcome, Err(sutra_store::Error::Unavailable(_))));
}
