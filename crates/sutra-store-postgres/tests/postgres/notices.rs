//! End notices between replicas (decision 0024): a group whose members end more instances than
//! one `NOTIFY` payload can name announces them in several, all heard by another replica's
//! listener, each instance once, in the order the members ran.

use std::time::Duration;

use sutra_core::snapshot::Status;
use sutra_store::prelude::*;
use sutra_store::{EndNotice, StepCommit};
use sutra_testkit::postgres::TestDatabase;

use crate::common::{HOUR, TENANT, owner, replica, started};

/// More than one payload's worth of ids (about 200 fit under PostgreSQL's 8000 bytes).
const ENDED: usize = 300;

#[tokio::test]
async fn a_group_ending_more_instances_than_one_notice_names_is_heard_whole_elsewhere() {
    let database = TestDatabase::create().await;
    let (listening, ending) = (replica(&database).await, replica(&database).await);
    assert_eq!(hear(&listening).await, EndNotice::Listening);
    let ids: Vec<String> = (0..ENDED)
        .map(|n| format!("0190c0de-0000-7000-8000-{n:012}"))
        .collect();
    for id in &ids {
        started(&ending, TENANT, id).await;
    }

    let mut group = ending.group(TENANT).await.unwrap();
    for id in &ids {
        group.member(TENANT).await.unwrap();
        let claimed = group
            .claim(TENANT, id, &owner("replica-b/lane-0"), HOUR)
            .await
            .unwrap();
        let mut snapshot = claimed.snapshot.clone();
        snapshot.status = Status::Completed;
        let step = StepCommit {
            claim: Some(claimed.token),
            snapshot,
            history: Vec::new(),
            arms: Vec::new(),
            disarms: Vec::new(),
            outbox: Vec::new(),
            taken: None,
            inbox: None,
            held_by: None,
            announce_end: true,
            children: Vec::new(),
            report: None,
        };
        group.commit_step(&step).await.unwrap();
    }
    group.commit().await.unwrap();

    let mut heard = Vec::new();
    let mut notices = 0;
    while heard.len() < ENDED {
        let EndNotice::Ended(named) = hear(&listening).await else {
            panic!("the listener restarted mid-test");
        };
        heard.extend(named);
        notices += 1;
    }
    assert_eq!(heard, ids);
    assert!(notices > 1, "{ENDED} ids fit one notice");
}

async fn hear(store: &sutra_store_postgres::PostgresStore) -> EndNotice {
    tokio::time::timeout(Duration::from_secs(30), store.end_notice())
        .await
        .expect("a notice arrives")
        .expect("the listener listens")
}
