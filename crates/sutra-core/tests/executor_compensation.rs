//! The executor on compensation (issue 34, `docs/design/time-and-undo.md` §4), step by step:
//! completions are logged as they happen, `compensate` runs their handlers newest first and one
//! at a time, a node completed three times is undone three times, `compensate: { scope }` undoes
//! only what completed inside that scope, and a handler that fails stops compensation with its
//! own code — restored, it runs again and the handlers that completed do not.

mod support;

use serde_json::json;
use support::{Sim, task_error};
use sutra_core::snapshot::Status;
use sutra_core::step::{Event, HistoryKind, Step};

const SAGAS: &str = r#"
name: d
channels:
  transfers: { transport: http, correlate: data.id }
  loops: { transport: http, correlate: data.id }
flows:
  transfer:
    start: { channel: transfers }
    nodes:
      - id: prepare
        set: { prepared: "= true" }
        compensate-with: unprepare
      - id: payment
        scope:
          nodes:
            - id: debit
              task: { topic: debit }
              output: debit
              compensate-with: refund-debit
            - id: credit
              task: { topic: credit }
              compensate-with: refund-credit
        on-error: undo
      - id: done
        end: { reply: done }
      - id: undo
        compensate: { scope: payment }
        next: failed
      - id: failed
        fail: { code: TRANSFER.FAILED, detail: "= vars.error.message" }
      - id: refund-debit
        task: { topic: refund-debit, input: "= vars.debit" }
      - id: refund-credit
        task: { topic: refund-credit }
      - id: unprepare
        set: { prepared: "= false" }
  loops:
    start: { channel: loops }
    nodes:
      - id: count
        set: { n: 0 }
      - id: reserve
        task: { topic: reserve, input: "= vars.n" }
        compensate-with: release
      - id: again
        set: { n: "= vars.n + 1" }
      - id: more
        choice:
          - when: vars.n < 3
            next: reserve
        otherwise: undo
      - id: undo
        compensate: {}
      - id: done
        end: { reply: "= vars.n" }
      - id: release
        task: { topic: release, input: "= vars.n" }
"#;

fn sim(flow: &str) -> Sim {
    Sim::checked(SAGAS, flow)
}

fn complete(sim: &mut Sim, node: &str) -> Step {
    let park = sim.park(node);
    sim.ok(Event::TaskCompleted {
        park,
        output: json!({"node": node}),
    })
}

/// The completions each `compensated` event of `steps` undid, in order.
fn undone(steps: &[&Step]) -> Vec<u64> {
    steps
        .iter()
        .flat_map(|step| &step.history)
        .filter(|event| event.kind == HistoryKind::Compensated)
        .filter_map(|event| event.detail["entry"].as_u64())
        .collect()
}

#[test]
fn a_failure_in_the_scope_undoes_what_completed_inside_it_newest_first() {
    let mut sim = sim("transfer");
    sim.start(json!({"id": "t1"}));
    complete(&mut sim, "debit");
    let park = sim.park("credit");
    let failed = sim.ok(Event::TaskFailed {
        park,
        error: task_error("NO.ACCOUNT", "closed"),
    });
    // Only the debit completed inside the scope; `prepare`, outside it, is not undone.
    assert_eq!(
        sim.snapshot.compensations.len(),
        2,
        "{:?}",
        sim.snapshot.compensations
    );
    let kinds: Vec<HistoryKind> = failed.history.iter().map(|e| e.kind).collect();
    assert!(kinds.contains(&HistoryKind::ErrorCaught), "{kinds:?}");
    assert!(
        kinds.contains(&HistoryKind::CompensationStarted),
        "{kinds:?}"
    );
    let refund = sim.park("refund-debit");
    let task = sim
        .snapshot
        .parks()
        .find(|p| p.id == refund)
        .unwrap()
        .kind
        .clone();
    assert!(
        matches!(&task, sutra_core::snapshot::ParkKind::Task { input, .. } if input["node"] == "debit"),
        "the handler sees the variables: {task:?}"
    );
    let step = complete(&mut sim, "refund-debit");
    assert_eq!(undone(&[&step]), [1]);
    assert_eq!(step.snapshot.status, Status::Failed);
    let failure = step.snapshot.failure.as_ref().unwrap();
    assert_eq!(
        (failure.code.as_str(), failure.detail.as_str()),
        ("TRANSFER.FAILED", "closed")
    );
    assert!(step.snapshot.compensations[1].compensated);
    assert!(
        !step.snapshot.compensations[0].compensated,
        "outside the scope"
    );
}

#[test]
fn a_node_completed_three_times_is_undone_three_times_newest_first() {
    let mut sim = sim("loops");
    sim.start(json!({"id": "l1"}));
    for _ in 0..2 {
        complete(&mut sim, "reserve");
    }
    let last = complete(&mut sim, "reserve");
    assert_eq!(sim.snapshot.compensations.len(), 3);
    let mut steps = vec![last];
    for _ in 0..3 {
        steps.push(complete(&mut sim, "release"));
    }
    let refs: Vec<&Step> = steps.iter().collect();
    assert_eq!(undone(&refs), [2, 1, 0], "newest first, one at a time");
    assert_eq!(sim.snapshot.status, Status::Completed);
    assert_eq!(sim.snapshot.reply, json!(3));
}

#[test]
fn a_failed_handler_fails_with_its_own_code_and_restore_runs_only_what_is_left() {
    let mut sim = sim("loops");
    sim.start(json!({"id": "l1"}));
    for _ in 0..3 {
        complete(&mut sim, "reserve");
    }
    let first = complete(&mut sim, "release");
    assert_eq!(undone(&[&first]), [2]);
    let park = sim.park("release");
    let failed = sim.ok(Event::TaskFailed {
        park,
        error: task_error("STOCK.LOCKED", "try later"),
    });
    assert_eq!(failed.snapshot.status, Status::Failed);
    let failure = failed.snapshot.failure.as_ref().unwrap();
    assert_eq!(failure.code, "SUTRA.RUNTIME.COMPENSATION.FAILED");
    assert!(
        failure.detail.contains("STOCK.LOCKED"),
        "{}",
        failure.detail
    );

    let restored = sim.ok(Event::Restore);
    assert_eq!(restored.snapshot.status, Status::Suspended);
    let mut steps = Vec::new();
    for _ in 0..2 {
        steps.push(complete(&mut sim, "release"));
    }
    let refs: Vec<&Step> = steps.iter().collect();
    assert_eq!(
        undone(&refs),
        [1, 0],
        "the completed handler is not run again"
    );
    assert_eq!(sim.snapshot.status, Status::Completed);
}

#[test]
fn compensating_nothing_goes_straight_on() {
    let yaml = SAGAS.replace(
        "      - id: count\n        set: { n: 0 }\n",
        "      - id: count\n        set: { n: 3 }\n      - id: early\n        compensate: {}\n",
    );
    let mut sim = Sim::checked(&yaml, "loops");
    let step = sim.start(json!({"id": "l1"}));
    assert!(
        step.history
            .iter()
            .any(|e| e.kind == HistoryKind::CompensationStarted),
        "{:?}",
        step.history
    );
    sim.park("reserve");
}
