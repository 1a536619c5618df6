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
