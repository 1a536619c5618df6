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
            .instance_summaries(OTHER_TENANT, &InstanceFilter::default(), false)
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
        let records = store.instance_summaries(TENANT, &filter, false).await;
        let ids = records.unwrap().into_iter().map(|summary| summary.id);
        ids.collect::<Vec<_>>()
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

/// A listing's summaries hold the rows' columns and a failed instance's failure, and its tokens
/// only when asked; a listing of whole instances stops at the one whose variables reach its
/// budget, the first whatever its size.
pub async fn listings_summarize_and_whole_pages_keep_to_their_budget<S: Store>(store: &S) {
    let failure = sutra_core::snapshot::Failure {
        code: "ORDER.REFUSED".to_owned(),
        detail: "the bank said no".to_owned(),
        token: Some(TokenId(0)),
        node: Some("debit".to_owned()),
    };
    let blob = json!("x".repeat(1000));
    let mut snapshots = Vec::new();
    for (n, status) in [
        (1, Status::Failed),
        (2, Status::Suspended),
        (3, Status::Completed),
    ] {
        let mut snapshot = snapshot(TENANT, &id(n), status);
        snapshot.vars.insert("blob".to_owned(), blob.clone());
        snapshot.failure = (status == Status::Failed).then(|| failure.clone());
        store
            .commit(&start(snapshot.clone(), &format!("evt-{n}")))
            .await
            .unwrap();
        snapshots.push(snapshot);
    }
    let all = InstanceFilter::default();
    let summaries = store.instance_summaries(TENANT, &all, false).await.unwrap();
    for (summary, snapshot) in summaries.iter().zip(&snapshots) {
        let info = &snapshot.instance;
        assert_eq!(
            (
                &summary.id,
                &summary.deployment,
                summary.version,
                &summary.flow
            ),
            (&info.id, &info.deployment, info.version, &info.flow)
        );
        assert_eq!(
            (
                summary.status,
                &summary.failure,
                &summary.parent,
                &summary.tokens
            ),
            (snapshot.status, &snapshot.failure, &None, &None)
        );
    }
    assert_eq!(summaries.len(), 3);
    let with_tokens = store.instance_summaries(TENANT, &all, true).await.unwrap();
    assert_eq!(with_tokens[1].tokens.as_ref(), Some(&snapshots[1].tokens));

    let vars = |n: usize| serde_json::to_vec(&snapshots[n].vars).unwrap().len();
    let whole = |budget| store.instances(TENANT, &all, budget);
    let read = whole(1).await.unwrap();
    assert_eq!(
        (read.records.len(), read.spent),
        (1, true),
        "the first, past the budget"
    );
    assert_eq!(read.records[0].snapshot.vars, snapshots[0].vars);
    let read = whole(vars(0) + 1).await.unwrap();
    assert_eq!((read.records.len(), read.spent), (2, true));
    let read = whole(vars(0) + vars(1) + vars(2) + 1).await.unwrap();
    assert_eq!(
        (read.records.len(), read.spent),
        (3, false),
        "all of them, within it"
    );
}
