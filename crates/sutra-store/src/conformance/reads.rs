//! Conformance of the reads: a fresh store answers readiness, tenants see only their own rows,
//! and instances page by keyset.

use super::fixtures::*;

pub async fn ping_succeeds_on_a_fresh_store<S: Store>(store: &S) {
    store.ping().await.unwrap();
}

pub async fn tenants_never_see_each_others_rows<S: Store>(store: &S) {
    let (id, other) = (id(1), id(2));
    started(store, TENANT, &id).await;
    let claim = claimed(store, &id, LANE_A).await;
    let commit = full_step(&claim, None);
    store.commit(&commit).await.unwrap();
    store
        .deploy(TENANT, "payments", "name: payments")
        .await
        .unwrap();
    let inbox = commit.inbox.as_ref().expect("the step consumed a message");

    assert_eq!(store.instance(OTHER_TENANT, &id).await.unwrap(), None);
    assert!(
        store
            .instances(OTHER_TENANT, &InstanceFilter::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.history(OTHER_TENANT, &id).await.unwrap().is_empty());
    assert!(store.tasks(OTHER_TENANT, &id).await.unwrap().is_empty());
    assert!(store.outbox(OTHER_TENANT, &id).await.unwrap().is_empty());
    assert_eq!(
        store.find_wait(OTHER_TENANT, REPLIES, &id).await.unwrap(),
        None
    );
    assert_eq!(
        store
            .inbox_answer(OTHER_TENANT, &inbox.channel, &inbox.event_id)
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .deployments(Some(OTHER_TENANT))
            .await
            .unwrap()
            .is_empty()
    );
    let claim = store.claim(OTHER_TENANT, &id, &owner(LANE_A), HOUR).await;
    assert!(
        matches!(claim, Err(Error::InstanceNotFound(_))),
        "{claim:?}"
    );

    // Another tenant's message on the same channel and key neither reaches this tenant's wait…
    let message = BufferedMessage {
        channel: REPLIES.to_owned(),
        key: id.clone(),
        message: message(&inbox.event_id),
        expires_at: now() + HOUR,
    };
    assert_eq!(store.buffer(OTHER_TENANT, &message).await.unwrap(), None);
    assert!(nothing_due(store).await);
    // …nor clashes with its alias.
    started(store, OTHER_TENANT, &other).await;
    let theirs = store
        .claim(OTHER_TENANT, &other, &owner(LANE_A), HOUR)
        .await
        .unwrap();
    let committed = store
        .commit(&arming(&theirs, vec![wait(ParkId(1), &id)]))
        .await
        .unwrap();
    assert_eq!(
        committed.due_now.len(),
        1,
        "their own buffered message is theirs"
    );
}

pub async fn instances_page_by_keyset<S: Store>(store: &S) {
    use Status::{Completed, Failed, Suspended};
    let rows = [
        (1, "a", Suspended),
        (2, "b", Failed),
        (3, "b", Suspended),
        (4, "a", Completed),
        (5, "a", Suspended),
    ];
    for (n, flow, status) in rows {
        let mut snapshot = snapshot(TENANT, &id(n), status);
        snapshot.instance.flow = flow.to_owned();
        store
            .commit(&start(snapshot, &format!("evt-{n}")))
            .await
            .unwrap();
    }
    let page = |filter: InstanceFilter| async move {
        let records = store.instances(TENANT, &filter).await.unwrap();
        records
            .into_iter()
            .map(|record| record.snapshot.instance.id)
            .collect::<Vec<_>>()
    };
    let ids = |ns: &[u32]| ns.iter().copied().map(id).collect::<Vec<_>>();
    let status = |status| InstanceFilter {
        status: Some(status),
        ..InstanceFilter::default()
    };
    let flow = |flow: &str| InstanceFilter {
        flow: Some(flow.to_owned()),
        ..InstanceFilter::default()
    };
    let after = |n, limit| InstanceFilter {
        after: Some(id(n)),
        limit,
        ..InstanceFilter::default()
    };

    assert_eq!(
        page(InstanceFilter::default()).await,
        ids(&[1, 2, 3, 4, 5]),
        "0 is no limit"
    );
    assert_eq!(page(status(Suspended)).await, ids(&[1, 3, 5]));
    assert_eq!(page(flow("a")).await, ids(&[1, 4, 5]));
    assert_eq!(
        page(InstanceFilter {
            flow: Some("a".to_owned()),
            ..status(Suspended)
        })
        .await,
        ids(&[1, 5])
    );
    assert_eq!(
        page(InstanceFilter {
            limit: 2,
            ..InstanceFilter::default()
        })
        .await,
        ids(&[1, 2])
    );
    assert_eq!(page(after(2, 2)).await, ids(&[3, 4]));
    assert_eq!(page(after(4, 2)).await, ids(&[5]));
    assert_eq!(page(after(5, 2)).await, ids(&[]));
    assert_eq!(
        page(InstanceFilter {
            status: Some(Suspended),
            ..after(1, 1)
        })
        .await,
        ids(&[3])
    );
    let version = |version| InstanceFilter {
        version: Some(version),
        ..InstanceFilter::default()
    };
    assert_eq!(page(version(1)).await, ids(&[1, 2, 3, 4, 5]));
    assert_eq!(page(version(2)).await, ids(&[]));
    let later = now().saturating_add(HOUR).unwrap();
    let created = |before, after| InstanceFilter {
        created_before: before,
        created_after: after,
        ..InstanceFilter::default()
    };
    assert_eq!(
        page(created(Some(later), None)).await,
        ids(&[1, 2, 3, 4, 5])
    );
    assert_eq!(page(created(None, Some(later))).await, ids(&[]));
}
