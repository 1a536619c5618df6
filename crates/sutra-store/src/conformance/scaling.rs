//! Conformance of the scaling signal's counts (SPEC §8, decision 0076): a tenant's backlog is
//! counted from its own rows, whatever another tenant holds, and every tenant's from all of them.

use super::fixtures::*;
use crate::{Available, Backlog, TaskPoll};

/// The topic of [`task`]: both tenants' tasks have it, each its own queue.
const TOPIC: &str = "debit-account";

pub async fn a_tenants_backlog_counts_none_of_another_tenants_rows<S: Store>(store: &S) {
    // The acme tenant: a buffered message, an instance whose step armed a task and wrote an
    // outbox row, and one that only started.
    let early = BufferedMessage {
        channel: REPLIES.to_owned(),
        key: "t-9".to_owned(),
        message: message("reply-9"),
        expires_at: now() + HOUR,
    };
    store.buffer(TENANT, &early).await.unwrap();
    started(store, TENANT, &id(1)).await;
    let claim = claimed(store, &id(1), LANE_A).await;
    store.commit(&full_step(&claim, None)).await.unwrap();
    started(store, TENANT, &id(2)).await;
    // The globex tenant: an instance whose task of the same topic a worker holds.
    started(store, OTHER_TENANT, &id(3)).await;
    let claim = store
        .claim(OTHER_TENANT, &id(3), &owner(LANE_A), HOUR)
        .await
        .unwrap();
    store
        .commit(&arming(&claim, vec![task(TASK_PARK)]))
        .await
        .unwrap();
    let poll = TaskPoll {
        tenant: OTHER_TENANT.to_owned(),
        worker: "worker-b".to_owned(),
        topics: vec![TOPIC.to_owned()],
        max: 1,
        lock: Some(HOUR),
    };
    assert_eq!(store.poll_tasks(&poll).await.unwrap().tasks.len(), 1);

    let acme_tasks = vec![Available {
        tenant: TENANT.to_owned(),
        topic: TOPIC.to_owned(),
        tasks: 1,
    }];
    let acme = Backlog {
        inbox: 1,
        outbox: 1,
        tasks_available: acme_tasks.clone(),
        tasks_locked: 0,
        instances: vec![(Status::Suspended, 2)],
    };
    let globex = Backlog {
        inbox: 0,
        outbox: 0,
        tasks_available: Vec::new(),
        tasks_locked: 1,
        instances: vec![(Status::Suspended, 1)],
    };
    let fleet = Backlog {
        inbox: 1,
        outbox: 1,
        tasks_available: acme_tasks,
        tasks_locked: 1,
        instances: vec![(Status::Suspended, 3)],
    };
    assert_eq!(store.backlog(Some(TENANT)).await.unwrap(), acme);
    assert_eq!(store.backlog(Some(OTHER_TENANT)).await.unwrap(), globex);
    assert_eq!(
        store.backlog(Some("initech")).await.unwrap(),
        Backlog::default()
    );
    assert_eq!(store.backlog(None).await.unwrap(), fleet);
}
