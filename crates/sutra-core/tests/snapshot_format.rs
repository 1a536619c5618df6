//! Snapshots written by earlier builds stay readable (docs/decisions/0004-snapshot-format.md).

use serde_json::{Value, json};
use sutra_core::snapshot::{ParkKind, Snapshot, SnapshotError, Status, TokenState};

fn fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/snapshot-format-1.json")).unwrap()
}

#[test]
fn format_1_snapshots_stay_readable() {
    let snapshot = Snapshot::from_json(fixture()).unwrap();
    assert_eq!(snapshot.status, Status::Suspended);
    assert_eq!(snapshot.audit_seq, 9);
    assert!(matches!(
        snapshot.tokens[0].state,
        TokenState::Joining { pending: 3 }
    ));
    let kinds: Vec<_> = snapshot.parks().map(|park| &park.kind).collect();
    assert!(matches!(kinds[0], ParkKind::Receive { key, .. } if key == "t1"));
    assert!(matches!(kinds[1], ParkKind::Wait { .. }));
    assert!(matches!(kinds[2], ParkKind::Task { backoff, .. } if backoff.as_secs() == 5));
}

#[test]
fn format_1_snapshots_are_written_back_unchanged() {
    let snapshot = Snapshot::from_json(fixture()).unwrap();
    assert_eq!(snapshot.to_json(), fixture());
}

#[test]
fn a_snapshot_from_a_newer_build_is_refused_not_guessed() {
    let mut newer = fixture();
    newer["format"] = json!(2);
    assert_eq!(Snapshot::from_json(newer), Err(SnapshotError::TooNew(2)));
    let mut unversioned = fixture();
    unversioned.as_object_mut().unwrap().remove("format");
    assert_eq!(
        Snapshot::from_json(unversioned),
        Err(SnapshotError::NoFormat)
    );
}

/// Each shape issues 33 and 34 added — a caller, a race and its arm, a loop with its bodies and
/// its deadline, a call with its deadline, a body's call waiting for its child's repair, a
/// reminder and its detached token, a compensating token, a handler's token and the log of
/// completions — is read and written back as stored.
fn composition_fixture() -> Value {
    serde_json::from_str(include_str!("fixtures/snapshot-format-1-composition.json")).unwrap()
}

#[test]
fn composition_shapes_are_read_and_written_back_unchanged() {
    let snapshot = Snapshot::from_json(composition_fixture()).unwrap();
    let caller = snapshot.instance.parent.as_ref().expect("a caller");
    assert_eq!((caller.park.0, caller.depth), (3, 1));
    let calls: Vec<_> = snapshot
        .parks()
        .filter_map(|park| match &park.kind {
            ParkKind::Call {
                flow, failed, due, ..
            } => Some((flow.as_str(), failed.is_some(), due.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(
        calls,
        [("reserve-one", true, false), ("shipping", false, true)]
    );
    let log: Vec<_> = (snapshot.compensations.iter())
        .map(|done| (done.node.as_str(), done.within.len(), done.compensated))
        .collect();
    assert_eq!(
        log,
        [
            ("reserve", 0, false),
            ("debit", 1, false),
            ("prepare", 0, true)
        ]
    );
    assert!(matches!(
        snapshot.tokens.last().and_then(|t| t.role),
        Some(sutra_core::snapshot::Role::Compensation { entry: 1 })
    ));
    assert_eq!(snapshot.to_json(), composition_fixture());
}
