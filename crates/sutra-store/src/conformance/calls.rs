//! Calls (docs/design/composition.md §5.3, §6): a parent's step inserts its children and their
//! starts, a disarmed `Call` park asks its live children to cancel, and a child's ending asks
//! its parent's park to hear of it — each in the committing step's own transaction, and nothing
//! of it when that step's claim was lost.

use sutra_core::step::ChildOutcome;

use super::fixtures::*;
use crate::{CANCEL_PARK, NewChild, Report, START_PARK};

/// The flow every child of these cases runs.
const CALLED: &str = "refund";

/// A child `n` of the parent instance `parent`, waited for at `park`.
fn child(n: u32, parent: &str, park: ParkId) -> NewChild {
    let mut snapshot = snapshot(TENANT, &id(n), Status::Created);
    snapshot.instance.flow = CALLED.to_owned();
    NewChild {
        snapshot,
        park,
        start: Message {
            id: format!("call:{parent}:{}", park.0),
            kind: "sutra.call".to_owned(),
            source: format!("/instances/{parent}"),
            subject: Some("refund".to_owned()),
            time: None,
            data: json!({ "child": n }),
        },
    }
}

/// The parent `parent`'s step calling `children`; returns the deliveries the commit asked.
async fn calls<S: Store>(store: &S, parent: &str, children: Vec<NewChild>) -> Vec<DeliveryId> {
    let claim = claimed(store, parent, LANE_A).await;
    let calling = StepCommit {
        children,
        ..step(&claim)
    };
    store.commit(&calling).await.unwrap().due_now
}

/// What each of `asked` reads back as: its instance, park and kind, in instance order.
async fn asked<S: Store>(store: &S, asked: &[DeliveryId]) -> Vec<(String, ParkId, DeliveryKind)> {
    let mut read = Vec::new();
    for &delivery in asked {
        let delivery = store.delivery(delivery).await.unwrap().expect("asked");
        assert!(delivery.due_at <= now(), "asked due now: {delivery:?}");
        read.push((delivery.instance, delivery.park, delivery.kind));
    }
    read.sort_by(|a, b| a.0.cmp(&b.0));
    read
}

/// The instance `id`'s step ending it with `status`, reporting `outcome` to `parent`'s `park`;
/// returns the deliveries the commit asked.
async fn ends<S: Store>(
    store: &S,
    id: &str,
    status: Status,
    report: Option<Report>,
) -> Result<Vec<DeliveryId>> {
    let claim = claimed(store, id, LANE_A).await;
    let mut snapshot = claim.snapshot.clone();
    snapshot.status = status;
    let ending = StepCommit {
        snapshot,
        report,
        ..step(&claim)
    };
    store
        .commit(&ending)
        .await
        .map(|committed| committed.due_now)
}

fn report(parent: &str, park: ParkId, child: &str, outcome: ChildOutcome) -> Report {
    Report {
        parent: parent.to_owned(),
        park,
        child: child.to_owned(),
        outcome,
    }
}

fn children_of(parent: &str) -> InstanceFilter {
    InstanceFilter {
        parent: Some(parent.to_owned()),
        ..InstanceFilter::default()
    }
}

async fn listed<S: Store>(store: &S, filter: InstanceFilter) -> Vec<String> {
    let records = store.instance_summaries(TENANT, &filter, false).await;
    let ids = records.unwrap().into_iter().map(|summary| summary.id);
    ids.collect()
}

pub async fn a_call_inserts_its_children_created_with_their_starts_due_now<S: Store>(store: &S) {
    let parent = id(1);
    started(store, TENANT, &parent).await;
    let called = vec![child(2, &parent, ParkId(5)), child(3, &parent, ParkId(6))];

    let due_now = calls(store, &parent, called.clone()).await;

    let starts = called.iter().map(|child| {
        let start = DeliveryKind::Start {
            message: child.start.clone(),
        };
        (child.snapshot.instance.id.clone(), START_PARK, start)
    });
    assert_eq!(asked(store, &due_now).await, starts.collect::<Vec<_>>());
    for child in &called {
        let record = record(store, &child.snapshot.instance.id).await;
        assert_eq!(record.snapshot, child.snapshot);
        assert_eq!(record.snapshot.status, Status::Created);
        assert_eq!(record.owner, None);
    }
    let by_flow = InstanceFilter {
        flow: Some(CALLED.to_owned()),
        ..children_of(&parent)
    };
    assert_eq!(listed(store, by_flow).await, [id(2), id(3)]);

    // An instance's first step may call too, whichever way it starts.
    let mut first = start(snapshot(TENANT, &id(4), Status::Suspended), "start-4");
    first.children = vec![child(5, &id(4), ParkId(1))];
    let due_now = store.commit(&first).await.unwrap().due_now;
    assert_eq!(asked(store, &due_now).await.len(), 1);
    let mut unasked = start(snapshot(TENANT, &id(6), Status::Suspended), "start-6");
    unasked.inbox = None;
    unasked.children = vec![child(7, &id(6), ParkId(1))];
    let due_now = store.commit(&unasked).await.unwrap().due_now;
    assert_eq!(asked(store, &due_now).await.len(), 1);
    assert_eq!(listed(store, children_of(&id(6))).await, [id(7)]);

    // A child called at a park the same step disarms is not among the children it cancels.
    let claim = claimed(store, &parent, LANE_A).await;
    let both = StepCommit {
        children: vec![child(8, &parent, ParkId(7))],
        disarms: vec![disarm(ParkId(7), ParkSort::Call)],
        ..step(&claim)
    };
    let due_now = store.commit(&both).await.unwrap().due_now;
    let kinds: Vec<_> = asked(store, &due_now)
        .await
        .into_iter()
        .map(|(.., kind)| kind)
        .collect();
    assert!(
        matches!(kinds[..], [DeliveryKind::Start { .. }]),
        "{kinds:?}"
    );
}

pub async fn a_lost_claim_calls_no_child<S: Store>(store: &S) {
    let parent = id(1);
    started(store, TENANT, &parent).await;
    let (lapsed, taker) = taken_over(store, &parent).await;
    let lost = StepCommit {
        children: vec![child(2, &parent, ParkId(5))],
        ..step(&lapsed)
    };

    assert_eq!(store.commit(&lost).await, Err(Error::ClaimLost));

    assert_eq!(store.instance(TENANT, &id(2)).await.unwrap(), None);
    assert_eq!(store.next_due().await.unwrap(), None, "no start was asked");
    store.commit(&step(&taker)).await.unwrap();
}

pub async fn a_disarmed_call_park_asks_cancel_of_its_live_children_only<S: Store>(store: &S) {
    let (parent, other) = (id(1), id(10));
    started(store, TENANT, &parent).await;
    started(store, TENANT, &other).await;
    let (waited, elsewhere) = (ParkId(5), ParkId(6));
    calls(
        store,
        &parent,
        vec![
            child(2, &parent, waited),
            child(3, &parent, waited),
            child(4, &parent, waited),
            child(5, &parent, waited),
            child(6, &parent, elsewhere),
        ],
    )
    .await;
    // Another parent's child at a park of the same number.
    calls(store, &other, vec![child(11, &other, waited)]).await;
    ends(store, &id(3), Status::Completed, None).await.unwrap();
    ends(store, &id(4), Status::Cancelled, None).await.unwrap();
    ends(store, &id(5), Status::Failed, None).await.unwrap();

    // A disarm of another sort at that park has no child to look for.
    let claim = claimed(store, &parent, LANE_A).await;
    let not_a_call = StepCommit {
        disarms: vec![disarm(waited, ParkSort::Wait)],
        ..step(&claim)
    };
    assert_eq!(store.commit(&not_a_call).await.unwrap().due_now, []);

    let claim = claimed(store, &parent, LANE_A).await;
    let disarming = StepCommit {
        disarms: vec![disarm(waited, ParkSort::Call)],
        ..step(&claim)
    };
    let due_now = store.commit(&disarming).await.unwrap().due_now;

    // The one created and the one failed (restorable) are live; the ended ones are not.
    let cancel = |n| (id(n), CANCEL_PARK, DeliveryKind::Cancel);
    assert_eq!(asked(store, &due_now).await, [cancel(2), cancel(5)]);

    // A lost claim asks none.
    let (lapsed, _taker) = taken_over(store, &parent).await;
    let lost = StepCommit {
        disarms: vec![disarm(elsewhere, ParkSort::Call)],
        ..step(&lapsed)
    };
    assert_eq!(store.commit(&lost).await, Err(Error::ClaimLost));
    let due = store.due_deliveries(100, REDELIVER_AT_ONCE).await.unwrap();
    let cancelled = due.iter().filter(|due| due.kind == DeliveryKind::Cancel);
    let cancelled: Vec<_> = cancelled.map(|due| due.instance.clone()).collect();
    assert_eq!(cancelled.len(), 2, "{cancelled:?}");
    assert!(!cancelled.contains(&id(6)));
}

pub async fn a_childs_ending_commit_reports_to_its_parent_in_the_same_transaction<S: Store>(
    store: &S,
) {
    let parent = id(1);
    started(store, TENANT, &parent).await;
    let park = ParkId(5);
    calls(
        store,
        &parent,
        vec![child(2, &parent, park), child(3, &parent, park)],
    )
    .await;
    let outcome = ChildOutcome::Completed {
        reply: json!({ "refunded": 10 }),
    };

    // A lost claim reports nothing.
    let (lapsed, taker) = taken_over(store, &id(2)).await;
    let mut snapshot = lapsed.snapshot.clone();
    snapshot.status = Status::Completed;
    let lost = StepCommit {
        snapshot: snapshot.clone(),
        report: Some(report(&parent, park, &id(2), outcome.clone())),
        ..step(&lapsed)
    };
    assert_eq!(store.commit(&lost).await, Err(Error::ClaimLost));
    let due = store.due_deliveries(100, REDELIVER_AT_ONCE).await.unwrap();
    assert!(due.iter().all(|due| due.instance != parent), "{due:?}");

    let ending = StepCommit {
        snapshot,
        ..lost.clone()
    };
    let ending = StepCommit {
        claim: Some(taker.token.clone()),
        ..ending
    };
    let due_now = store.commit(&ending).await.unwrap().due_now;
    let ended = DeliveryKind::ChildEnded {
        child: id(2),
        outcome,
    };
    assert_eq!(
        asked(store, &due_now).await,
        [(parent.clone(), park, ended)]
    );

    // A failed parent (restorable) still hears; an ended or missing one hears nothing.
    let failed = ChildOutcome::Failed {
        code: "REFUND.REFUSED".to_owned(),
        detail: "the bank said no".to_owned(),
    };
    let failing = report(&parent, park, &id(3), failed.clone());
    ends(store, &parent, Status::Failed, None).await.unwrap();
    let due_now = ends(store, &id(3), Status::Failed, Some(failing))
        .await
        .unwrap();
    assert_eq!(asked(store, &due_now).await.len(), 1);
    ends(store, &parent, Status::Completed, None).await.unwrap();
    for (n, parent) in [(4, parent.clone()), (5, id(99))] {
        started(store, TENANT, &id(n)).await;
        let late = report(&parent, park, &id(n), ChildOutcome::Cancelled);
        let due_now = ends(store, &id(n), Status::Cancelled, Some(late)).await;
        assert_eq!(due_now, Ok(Vec::new()), "no report to {parent}");
        assert_eq!(
            record(store, &id(n)).await.snapshot.status,
            Status::Cancelled
        );
    }
}

pub async fn instances_list_exactly_a_parents_children_paged_by_id<S: Store>(store: &S) {
    let (parent, other) = (id(1), id(10));
    started(store, TENANT, &parent).await;
    started(store, TENANT, &other).await;
    let called = (2..=5).map(|n| child(n, &parent, ParkId(u64::from(n))));
    calls(store, &parent, called.collect()).await;
    calls(store, &other, vec![child(11, &other, ParkId(2))]).await;
    ends(store, &id(3), Status::Completed, None).await.unwrap();

    assert_eq!(
        listed(store, children_of(&parent)).await,
        [id(2), id(3), id(4), id(5)]
    );
    let page = |after: Option<u32>| InstanceFilter {
        after: after.map(id),
        limit: 2,
        ..children_of(&parent)
    };
    assert_eq!(listed(store, page(None)).await, [id(2), id(3)]);
    assert_eq!(listed(store, page(Some(3))).await, [id(4), id(5)]);
    assert_eq!(listed(store, page(Some(5))).await, Vec::<String>::new());
    let created = InstanceFilter {
        status: Some(Status::Created),
        ..children_of(&parent)
    };
    assert_eq!(listed(store, created).await, [id(2), id(4), id(5)]);
    assert_eq!(
        listed(store, children_of(&id(2))).await,
        Vec::<String>::new()
    );
    let elsewhere = store
        .instance_summaries(OTHER_TENANT, &children_of(&parent), false)
        .await
        .unwrap();
    assert_eq!(elsewhere, [], "another tenant sees no child");
}

pub async fn every_call_delivery_kind_reads_back_as_asked<S: Store>(store: &S) {
    let id = id(1);
    started(store, TENANT, &id).await;
    let ended = |outcome| DeliveryKind::ChildEnded {
        child: "0190c0de-0000-7000-8000-000000000002".to_owned(),
        outcome,
    };
    let kinds = [
        (
            START_PARK,
            DeliveryKind::Start {
                message: message("m-1"),
            },
        ),
        (CANCEL_PARK, DeliveryKind::Cancel),
        (
            ParkId(5),
            ended(ChildOutcome::Completed {
                reply: json!({ "nested": [1, null, "x"] }),
            }),
        ),
        (
            ParkId(6),
            ended(ChildOutcome::Failed {
                code: "REFUND.REFUSED".to_owned(),
                detail: "no".to_owned(),
            }),
        ),
        (ParkId(7), ended(ChildOutcome::Cancelled)),
    ];
    for (park, kind) in kinds {
        let asked = NewDelivery {
            park,
            kind,
            ..relay(&id, park, now())
        };
        let delivery = store.ask(&asked).await.unwrap();
        assert_eq!(
            store.delivery(delivery).await.unwrap(),
            Some(delivered(delivery, asked, 0))
        );
    }
}

pub async fn the_retirement_gate_keeps_a_version_while_a_created_child_is_on_it<S: Store>(
    store: &S,
) {
    for _ in 0..2 {
        store
            .deploy(TENANT, "payments", "version: n")
            .await
            .unwrap();
    }
    let parent = id(1);
    started(store, TENANT, &parent).await;
    calls(store, &parent, vec![child(2, &parent, ParkId(5))]).await;
    // The parent ends without disarming the call: only the child keeps version 1.
    ends(store, &parent, Status::Completed, None).await.unwrap();

    let kept = store.retirement(TENANT, "payments", 1).await.unwrap();
    assert_eq!(kept.instances, 1, "{kept:?}");
    lapse().await;
    assert_eq!(store.retire_drained(LAPSE).await.unwrap(), []);

    ends(store, &id(2), Status::Cancelled, None).await.unwrap();
    assert!(
        store
            .retirement(TENANT, "payments", 1)
            .await
            .unwrap()
            .clear()
    );
}

/// A dispatcher looks up the callers of a batch of called instances for a cancelled one before
/// their starts run (issue 48): found however far up, the nearest first, for each instance of
/// the batch in one look, and never through another tenant's rows.
pub async fn a_cancelled_ancestor_is_found_however_far_up_and_in_its_tenant_only<S: Store>(
    store: &S,
) {
    let (root, child_id, grandchild_id) = (id(1), id(2), id(3));
    started(store, TENANT, &root).await;
    calls(store, &root, vec![child(2, &root, ParkId(5))]).await;
    calls(store, &child_id, vec![child(3, &child_id, ParkId(1))]).await;
    let key = |id: &str, tenant: &str| InstanceKey {
        tenant: tenant.to_owned(),
        id: id.to_owned(),
    };
    let (root_key, child_key) = (key(&root, TENANT), key(&child_id, TENANT));
    let grandchild = key(&grandchild_id, TENANT);
    let elsewhere = key(&grandchild_id, OTHER_TENANT);
    let batch = [
        root_key.clone(),
        child_key.clone(),
        grandchild.clone(),
        elsewhere,
    ];
    let found = async || {
        let mut found = store.cancelled_ancestors(&batch).await.unwrap();
        found.sort();
        found
    };
    assert_eq!(found().await, [], "nothing cancelled");
    assert_eq!(store.cancelled_ancestors(&[]).await.unwrap(), []);

    ends(store, &root, Status::Cancelled, None).await.unwrap();
    let mut expected = vec![
        (child_key.clone(), root.clone()),
        (grandchild.clone(), root.clone()),
    ];
    expected.sort();
    assert_eq!(
        found().await,
        expected,
        "two levels up; not the root itself"
    );
    ends(store, &child_id, Status::Cancelled, None)
        .await
        .unwrap();
    let mut expected = vec![(child_key, root), (grandchild, child_id)];
    expected.sort();
    assert_eq!(found().await, expected, "the nearest");
}
