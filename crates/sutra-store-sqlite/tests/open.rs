//! What `open` promises beyond the store trait: the URL forms `sutra serve`
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
            parent: None,
        }),
        history: Vec::new(),
        arms: Vec::new(),
        disarms: Vec::new(),
        outbox: Vec::new(),
        taken: None,
        inbox: None,
        held_by: None,
        announce_end: false,
        children: Vec::new(),
        report: None,
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
    let store = sutra_store_sqlite::open(&url).await.unwrap();
    store.commit(&start("i-1")).await.unwrap();
    store
        .deploy(TENANT, "payments", "name: payments")
        .await
        .unwrap();
    store.backend().close().await;

    // Opening again runs the migrator over an up-to-date schema: it must change nothing.
    let reopened = sutra_store_sqlite::open(&url).await.unwrap();

    assert!(has_instance(&reopened, "i-1").await);
    assert_eq!(reopened.deployments(Some(TENANT)).await.unwrap().len(), 1);
    reopened.backend().close().await;
}

#[tokio::test]
async fn both_url_forms_name_a_file_created_if_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("short-form.db");
    assert!(!path.exists());

    let store = sutra_store_sqlite::open(&format!("sqlite:{}", path.display()))
        .await
        .unwrap();
    store.commit(&start("i-1")).await.unwrap();
    store.backend().close().await;

    assert!(path.exists());
    let long_form = sutra_store_sqlite::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    assert!(has_instance(&long_form, "i-1").await);
}

#[tokio::test]
async fn every_memory_database_is_its_own() {
    let first = sutra_store_sqlite::open("sqlite::memory:").await.unwrap();
    let second = sutra_store_sqlite::open("sqlite::memory:").await.unwrap();

    first.commit(&start("i-1")).await.unwrap();

    assert!(has_instance(&first, "i-1").await);
    assert!(!has_instance(&second, "i-1").await);
}

#[tokio::test]
async fn a_malformed_url_is_refused() {
    let outcome = sutra_store_sqlite::open("sqlite://db?mode=bogus").await;
    assert!(matches!(outcome, Err(sutra_store::Error::Unavailable(_))));
}

/// JSON columns are TEXT holding exactly what `serde_json` writes compactly, as every earlier
/// build wrote them: a database written before reads back, and one written now reads as before.
#[tokio::test]
async fn json_columns_keep_the_text_earlier_builds_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("sutra.db").display());
    let store = sutra_store_sqlite::open(&url).await.unwrap();
    let step = start("i-1");
    store.commit(&step).await.unwrap();
    store.backend().close().await;

    let raw = sqlx::SqlitePool::connect(&url).await.unwrap();
    let (kind, text): (String, String) =
        sqlx::query_as("SELECT typeof(snapshot), snapshot FROM instances WHERE id = 'i-1'")
            .fetch_one(&raw)
            .await
            .unwrap();
    assert_eq!(kind, "text");
    assert_eq!(text, step.snapshot.to_json().to_string());
    // A row as an earlier build wrote it: its JSON bound as a string.
    let mut earlier = start("i-2").snapshot;
    earlier.vars.insert("note".to_owned(), "ünïcode".into());
    sqlx::query(
        "INSERT INTO instances
             (id, tenant, deployment, version, flow, status, snapshot, created_at, updated_at)
         VALUES ('i-2', ?1, 'payments', 1, 'money-transfer', ?2, ?3, 0, 0)",
    )
    .bind(TENANT)
    .bind(earlier.status.as_str())
    .bind(earlier.to_json().to_string())
    .execute(&raw)
    .await
    .unwrap();
    raw.close().await;

    let reopened = sutra_store_sqlite::open(&url).await.unwrap();
    let record = reopened.instance(TENANT, "i-2").await.unwrap().unwrap();
    assert_eq!(record.snapshot, earlier);
}
