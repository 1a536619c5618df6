//! Bulk repair through the CLI and the HTTP API on PostgreSQL: a thousand instances failed by
//! one bad version are migrated onto its fix and restored, by filter, a page at a time; every
//! instance is reported, and running the same repair again touches nothing. A cancel with no
//! filter, which would end them all, is refused `SUTRA.ADMIN.CANCEL.UNFILTERED` until it says
//! `all` (decision 0081).

use futures_util::StreamExt;
use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Server, serve, stdout_of};

mod repair;
use repair::{ONTO_V2, V1, V2};

const INSTANCES: usize = 1_000;

/// `sutra --json instances bulk …` against `server`: its report.
fn sutra_bulk(server: &Server, args: &[&str]) -> Value {
    let report = stdout_of(
        std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
            .args(["--server", &server.url(""), "--json", "instances", "bulk"])
            .args(args),
    );
    serde_json::from_str(&report).unwrap()
}

/// Every page of a bulk call through the API; the results of all of them.
async fn bulk_pages(server: &Server, mut body: Value) -> Vec<Value> {
    let mut results = Vec::new();
    loop {
        let (status, page) = server.post_json("/v1/instances/bulk", &body).await;
        assert_eq!(status, 200, "{page}");
        results.extend(page["results"].as_array().unwrap().iter().cloned());
        match page["next"].as_str() {
            Some(next) => body["after"] = json!(next),
            None => return results,
        }
    }
}

fn outcomes(results: &[Value]) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::new();
    for result in results {
        *counts
            .entry(result["outcome"].as_str().unwrap().to_owned())
            .or_insert(0) += 1;
    }
    counts.into_iter().collect()
}

#[tokio::test]
async fn a_thousand_failed_instances_are_migrated_and_restored_by_filter_and_again_touches_nothing()
{
    let database = TestDatabase::create().await;
    let server = serve!(database.url()).deployed(V1).await;
    let sends = futures_util::stream::iter(0..INSTANCES)
        .map(|n| {
            let server = &server;
            async move {
                let data = json!({"id": format!("o{n}"), "amount": "x"});
                server.send("orders", &format!("evt-{n}"), data).await
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<_>>()
        .await;
    assert!(sends.iter().all(|(status, _)| *status == 202));
    server.deploy_accepted(V2).await;

    let failed_on_v1 = [
        "migrate",
        "--status",
        "failed",
        "--version",
        "1",
        "--failure-code",
        "SUTRA.RUNTIME.EXPRESSION.ERROR",
    ];
    let migrate = [&failed_on_v1[..], &ONTO_V2].concat();
    let counted = sutra_bulk(&server, &[&migrate[..], &["--dry-run"]].concat());
    assert_eq!(
        counted["counts"],
        json!({"matched": INSTANCES}),
        "a dry run touches nothing"
    );
    let migrated = sutra_bulk(&server, &migrate);
    assert_eq!(migrated["counts"], json!({"done": INSTANCES}));
    let again = sutra_bulk(&server, &migrate);
    assert_eq!(again["counts"], json!({}), "nothing is left on version 1");

    let restore =
        json!({"filter": {"status": "failed", "version": 2}, "action": "restore", "limit": 500});
    let restored = bulk_pages(&server, restore.clone()).await;
    assert_eq!(outcomes(&restored), [("done".to_owned(), INSTANCES)]);
    let mut ids: Vec<&str> = restored
        .iter()
        .map(|r| r["instance"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), INSTANCES, "every instance is reported once");
    assert!(restored.iter().all(|r| r["status"] == "suspended"));
    assert!(
        bulk_pages(&server, restore).await.is_empty(),
        "the same call again touches nothing"
    );

    let (status, problem) = server
        .post_json("/v1/instances/bulk", &json!({"action": "repair"}))
        .await;
    assert_eq!(
        (status, problem["code"].clone()),
        (400, json!("SUTRA.API.REQUEST.INVALID"))
    );

    let (status, problem) = server
        .post_json("/v1/instances/bulk", &json!({"action": "cancel"}))
        .await;
    assert_eq!(
        (status, problem["code"].clone()),
        (400, json!("SUTRA.ADMIN.CANCEL.UNFILTERED")),
        "{problem}"
    );
    let counted = sutra_bulk(&server, &["cancel", "--dry-run"]);
    assert_eq!(counted["counts"], json!({"matched": INSTANCES}));
    let cancelled = sutra_bulk(&server, &["cancel", "--all"]);
    assert_eq!(
        cancelled["counts"],
        json!({"done": INSTANCES}),
        "the refusal cancelled none"
    );
}
