//! Conformance of deployments: each deploy makes version n+1 active and the previous draining,
//! and the revision grows with every deploy.

use super::fixtures::*;

pub async fn deploy_makes_version_n_plus_one_active_and_the_previous_draining<S: Store>(store: &S) {
    let deploy =
        |tenant, name, source| async move { store.deploy(tenant, name, source).await.unwrap() };
    let v1 = deploy(TENANT, "payments", "version: one").await;
    let v2 = deploy(TENANT, "payments", "version: two").await;
    let v3 = deploy(TENANT, "payments", "version: three").await;
    let refunds = deploy(TENANT, "refunds", "version: one").await;
    let elsewhere = deploy(OTHER_TENANT, "payments", "version: one").await;

    let summary = |record: &DeploymentRecord| (record.name.clone(), record.version, record.status);
    let active = |name: &str, version| (name.to_owned(), version, DeploymentStatus::Active);
    assert_eq!(
        [&v1, &v2, &v3, &refunds, &elsewhere].map(summary),
        [
            active("payments", 1),
            active("payments", 2),
            active("payments", 3),
            active("refunds", 1),
            active("payments", 1),
        ]
    );
    let draining = |record: DeploymentRecord| DeploymentRecord {
        status: DeploymentStatus::Draining,
        ..record
    };
    assert_eq!(
        store.deployments(Some(TENANT)).await.unwrap(),
        [draining(v1), draining(v2), v3, refunds]
    );
    assert_eq!(store.deployments(None).await.unwrap().len(), 5);
}

pub async fn the_deployment_revision_grows_with_every_deploy<S: Store>(store: &S) {
    let fresh = store.deployment_revision().await.unwrap();
    store
        .deploy(TENANT, "payments", "version: one")
        .await
        .unwrap();
    store
        .deploy(OTHER_TENANT, "payments", "version: one")
        .await
        .unwrap();
    store
        .deploy(TENANT, "payments", "version: two")
        .await
        .unwrap();

    assert_eq!(
        store.deployment_revision().await.unwrap(),
        fresh + 3,
        "every version of every tenant counts"
    );
}

/// The retirement gate (SPEC §7.3): a draining version is kept by its unended instances and its
/// pending outbox rows, counted alike for every caller, and retires — check and write in one —
/// only when nothing keeps it and its successor is older than the grace.
pub async fn a_draining_version_retires_only_when_nothing_keeps_it<S: Store>(store: &S) {
    for name in [
        "payments", "payments", "refunds", "refunds", "audits", "audits",
    ] {
        store.deploy(TENANT, name, "version: n").await.unwrap();
    }
    let pinned = |n: u32, deployment: &str, status: Status| {
        let mut snapshot = snapshot(TENANT, &id(n), status);
        snapshot.instance.deployment = deployment.to_owned();
        start(snapshot, &format!("start-{n}"))
    };
    // payments v1: a failed instance and a pending row it emitted.
    let mut failed = pinned(1, "payments", Status::Failed);
    failed.outbox.push(OutboxEntry {
        channel: "ledger".to_owned(),
        payload: json!({}),
        message_key: None,
        idempotency_key: format!("{}:1:notify", id(1)),
    });
    store.commit(&failed).await.unwrap();
    // refunds v1: only a completed instance, which keeps nothing.
    store
        .commit(&pinned(2, "refunds", Status::Completed))
        .await
        .unwrap();

    let kept = |instances, outbox| Retirement {
        instances,
        outbox,
        tasks: 0,
    };
    assert_eq!(
        store.retirement(TENANT, "payments", 1).await.unwrap(),
        kept(1, 1)
    );
    assert_eq!(
        store.retirement(TENANT, "refunds", 1).await.unwrap(),
        kept(0, 0)
    );
    assert!(store.retirement(TENANT, "audits", 1).await.unwrap().clear());
    assert_eq!(
        store.retirement(OTHER_TENANT, "payments", 1).await.unwrap(),
        kept(0, 0),
        "another tenant's rows are not counted"
    );

    assert!(
        store.retire_drained(HOUR).await.unwrap().is_empty(),
        "no successor is an hour old yet"
    );
    lapse().await;
    let retired: Vec<_> = store
        .retire_drained(LAPSE)
        .await
        .unwrap()
        .into_iter()
        .map(|record| (record.name, record.version, record.status))
        .collect();
    let retired_one = |name: &str| (name.to_owned(), 1, DeploymentStatus::Retired);
    assert_eq!(retired.len(), 2, "{retired:?}");
    assert!(retired.contains(&retired_one("refunds")), "{retired:?}");
    assert!(retired.contains(&retired_one("audits")), "{retired:?}");
    assert!(store.retire_drained(LAPSE).await.unwrap().is_empty());
    let statuses: Vec<_> = store
        .deployments(Some(TENANT))
        .await
        .unwrap()
        .into_iter()
        .filter(|record| record.name == "payments")
        .map(|record| record.status)
        .collect();
    assert_eq!(
        statuses,
        [DeploymentStatus::Draining, DeploymentStatus::Active],
        "kept by its failed instance and its pending row"
    );
}
