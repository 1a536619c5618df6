//! The executor on calls (decision 0052), step by step: the park and the child's start a call
//! makes in one step, what each way a child ends does to its caller, that every ending of a
//! called instance answers its caller, and that restore and migration treat a call's child as
//! the decision says. The flows are read by the checker; the simulator is the executor tests'.

mod support;

use std::collections::BTreeMap;

use serde_json::{Value, json};
use support::{Sim, checked_flows, ctx, new_snapshot, task_error};
use sutra_core::exec::{self, migrate};
use sutra_core::model::Flow;
use sutra_core::snapshot::{Caller, ParkId, ParkKind, ParkSort, Snapshot, Status};
use sutra_core::step::{ChildOutcome, ChildStart, Effect, Event, HistoryKind, Rejection, Step};

const CALLS: &str = r#"
name: d
channels:
  orders: { transport: http, correlate: data.id }
  caught: { transport: http, correlate: data.id }
flows:
  f:
    start: { channel: orders }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: "= vars.input.id" } }
        output: shipment
        deadline: { after: PT1H, next: late }
      - id: shipped
        end: { reply: "= vars.shipment" }
      - id: late
        end: { reply: late }
  caught:
    start: { channel: caught }
    nodes:
      - id: ship
        call: { flow: shipping }
        on-error: failed
      - id: failed
        end: { reply: "= vars.error" }
  shipping:
    nodes:
      - id: book
        task: { topic: book, input: "= vars.input" }
        output: booking
      - id: booked
        end: { reply: "= vars.booking" }
"#;

fn flows() -> BTreeMap<String, Flow> {
    checked_flows(CALLS)
}

fn sim(flow: &str) -> Sim {
    Sim::checked(CALLS, flow)
}

/// A child of `i1`'s call on park 1, as the engine creates it: `shipping`, not started.
fn child_sim() -> Sim {
    let mut snapshot = new_snapshot();
    snapshot.instance.id = "c1".into();
    snapshot.instance.flow = "shipping".into();
    snapshot.instance.parent = Some(Caller {
        instance: "i1".into(),
        park: ParkId(1),
        node: "ship".into(),
        depth: 1,
    });
    Sim {
        flow: flows()["shipping"].clone(),
        snapshot,
        ctx: ctx(),
    }
}

/// The children a step asked for.
fn called(step: &Step) -> Vec<(ParkId, ChildStart)> {
    step.effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Call { park, child } => Some((*park, child.clone())),
            _ => None,
        })
        .collect()
}

/// What a step told its instance's caller, if anything.
fn answered(step: &Step) -> Option<(Caller, ChildOutcome)> {
    step.effects.iter().find_map(|effect| match effect {
        Effect::Answer { to, outcome } => Some((to.clone(), outcome.clone())),
        _ => None,
    })
}

/// The park and child the token at `ship` waits for.
fn waited(snapshot: &Snapshot) -> (ParkId, String) {
    let park = (snapshot.tokens.iter())
        .find_map(|token| token.park())
        .expect("a token waits");
    match &park.kind {
        ParkKind::Call { child, .. } => (park.id, child.clone()),
        other => panic!("not a call's park: {other:?}"),
    }
}

fn ended(sim: &mut Sim, outcome: ChildOutcome) -> Result<Step, Rejection> {
    let (park, child) = waited(&sim.snapshot);
    sim.apply(Event::ChildEnded {
        park,
        child,
        outcome,
    })
}

#[test]
fn a_call_parks_on_its_child_and_asks_for_it_in_the_same_step() {
    let mut sim = sim("f");
    let step = sim.start(json!({"id": "o1"}));
    let (park, child) = waited(&step.snapshot);
    let calls = called(&step);
    assert_eq!(calls.len(), 1, "{:?}", step.effects);
    let (asked, start) = &calls[0];
    assert_eq!(*asked, park);
    assert_eq!(start.id, child);
    assert_eq!(
        (start.flow.as_str(), start.node.as_str(), start.depth),
        ("shipping", "ship", 1)
    );
    assert_eq!(start.input, json!({"order": "o1"}));
    let id = uuid::Uuid::parse_str(&child).expect("a child id is a UUID");
    assert_eq!(id.get_version_num(), 7, "ids sort by creation");
    let step_kinds: Vec<HistoryKind> = step.history.iter().map(|e| e.kind).collect();
    assert!(step_kinds.contains(&HistoryKind::Called), "{step_kinds:?}");
    // The park's deadline is its own timer.
    let park = step.snapshot.parks().next().expect("a park");
    assert!(park.kind.due().is_some());
    assert_eq!(park.kind.sort(), ParkSort::Call);
    assert_eq!(answered(&step), None, "a root instance answers no caller");
}

#[test]
fn two_steps_seeded_alike_mint_the_same_child_and_seeded_apart_different_ones() {
    let child_of = |seed: u128| {
        let mut sim = sim("f");
        sim.ctx.id_seed = seed;
        let step = sim.start(json!({"id": "o1"}));
        waited(&step.snapshot).1
    };
    assert_eq!(
        child_of(7),
        child_of(7),
        "a step is a function of its inputs"
    );
    assert_ne!(child_of(7), child_of(8));
}

#[test]
fn a_completed_child_moves_its_caller_on_with_its_reply() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let reply = json!({"booking": "DHL-1"});
    let step = ended(
        &mut sim,
        ChildOutcome::Completed {
            reply: reply.clone(),
        },
    )
    .unwrap();
    assert_eq!(step.snapshot.status, Status::Completed);
    assert_eq!(step.snapshot.vars["shipment"], reply);
    let ends: Vec<HistoryKind> = step.history.iter().map(|e| e.kind).collect();
    assert_eq!(ends.first(), Some(&HistoryKind::ChildEnded), "{ends:?}");
}

#[test]
fn a_report_from_another_child_is_stale() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let (park, _) = waited(&sim.snapshot);
    let stale = sim.apply(Event::ChildEnded {
        park,
        child: "someone-else".into(),
        outcome: ChildOutcome::Cancelled,
    });
    assert_eq!(stale, Err(Rejection::Stale(Some(park))));
}

#[test]
fn a_failed_child_goes_to_on_error_with_its_code_message_and_id() {
    let mut sim = sim("caught");
    sim.start(json!({"id": "o1"}));
    let (_, child) = waited(&sim.snapshot);
    let failed = ChildOutcome::Failed {
        code: "NO.CARRIER".into(),
        detail: "none left".into(),
    };
    let step = ended(&mut sim, failed).unwrap();
    assert_eq!(step.snapshot.status, Status::Completed);
    assert_eq!(
        step.snapshot.reply,
        json!({"code": "NO.CARRIER", "message": "none left", "instance": child})
    );
}

#[test]
fn a_cancelled_child_goes_to_on_error_with_the_call_cancelled_code() {
    let mut sim = sim("caught");
    sim.start(json!({"id": "o1"}));
    let step = ended(&mut sim, ChildOutcome::Cancelled).unwrap();
    assert_eq!(step.snapshot.reply["code"], "SUTRA.RUNTIME.CALL.CANCELLED");
}

#[test]
fn an_uncaught_child_failure_keeps_the_caller_waiting_on_the_same_park() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let (park, child) = waited(&sim.snapshot);
    let failed = ChildOutcome::Failed {
        code: "NO.CARRIER".into(),
        detail: "none left".into(),
    };
    let step = ended(&mut sim, failed).unwrap();
    assert_eq!(step.snapshot.status, Status::Suspended);
    assert_eq!(
        waited(&step.snapshot),
        (park, child),
        "the same park, the same child"
    );
    let held = step.snapshot.parks().next().expect("still parked");
    assert!(
        matches!(&held.kind, ParkKind::Call { failed: Some(f), .. } if f.code == "NO.CARRIER"),
        "{held:?}"
    );
    assert!(
        step.effects.is_empty(),
        "nothing armed or disarmed: {:?}",
        step.effects
    );

    // Restored, the child completes: its report answers the same park.
    let step = ended(&mut sim, ChildOutcome::Completed { reply: json!("ok") }).unwrap();
    assert_eq!(step.snapshot.status, Status::Completed);
}

#[test]
fn a_failed_caller_is_restored_with_a_new_child() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let (park, first) = waited(&sim.snapshot);
    let failed = exec::fail(&sim.snapshot, "X.POISONED", "died", ctx()).unwrap();
    assert!(
        failed
            .effects
            .iter()
            .any(|e| matches!(e, Effect::Disarm(d) if d.park == park && d.sort == ParkSort::Call)),
        "the failure resolves the call's park, which cancels its child: {:?}",
        failed.effects
    );
    sim.snapshot = failed.snapshot;
    sim.ctx.id_seed = 99;
    let restored = sim.ok(Event::Restore);
    let (again, second) = waited(&restored.snapshot);
    assert_ne!(again, park, "a fresh park");
    assert_ne!(second, first, "a new child");
    assert_eq!(called(&restored).len(), 1, "{:?}", restored.effects);
}

#[test]
fn a_deadline_ends_the_call() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let (park, _) = waited(&sim.snapshot);
    let step = sim.ok(Event::TimerFired { park });
    assert_eq!(step.snapshot.reply, json!("late"));
    assert!(called(&step).is_empty());
}

#[test]
fn every_ending_of_a_called_instance_answers_its_caller() {
    let caller = |step: &Step| answered(step).map(|(to, _)| (to.instance, to.park));
    let at = Some(("i1".to_owned(), ParkId(1)));

    let mut child = child_sim();
    let step = child.start(json!({"order": "o1"}));
    assert_eq!(answered(&step), None, "a running child answers nothing yet");
    assert_eq!(
        step.history[0].detail["parent"],
        json!({"instance": "i1", "node": "ship"})
    );
    let park = child.park("book");
    let step = child.ok(Event::TaskCompleted {
        park,
        output: json!("DHL"),
    });
    assert_eq!(caller(&step), at);
    assert_eq!(
        answered(&step).map(|(_, outcome)| outcome),
        Some(ChildOutcome::Completed {
            reply: json!("DHL")
        })
    );

    let mut child = child_sim();
    child.start(json!({"order": "o1"}));
    let park = child.park("book");
    let step = child.ok(Event::TaskFailed {
        park,
        error: task_error("NO.CARRIER", "none"),
    });
    assert!(
        matches!(answered(&step), Some((_, ChildOutcome::Failed { code, .. })) if code == "NO.CARRIER")
    );
    let step = exec::fail(&child.snapshot, "X", "y", ctx());
    assert!(step.is_err(), "a failed instance is not failed again");

    let mut child = child_sim();
    child.start(json!({"order": "o1"}));
    let step = exec::fail(
        &child.snapshot,
        "SUTRA.RUNTIME.STEP.POISONED",
        "died",
        ctx(),
    )
    .unwrap();
    assert!(matches!(
        answered(&step),
        Some((_, ChildOutcome::Failed { .. }))
    ));

    // Cancelled before its first step: the start never ran.
    let mut child = child_sim();
    let step = child.ok(Event::Cancel { reason: None });
    assert_eq!(step.snapshot.status, Status::Cancelled);
    assert_eq!(
        answered(&step).map(|(_, o)| o),
        Some(ChildOutcome::Cancelled)
    );
    let rejected = sim("f").apply(Event::Cancel { reason: None });
    assert!(
        matches!(rejected, Err(Rejection::InvalidState { .. })),
        "only a called instance is cancelled before it starts"
    );
}

#[test]
fn migration_keeps_a_suspended_callers_park_and_child() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let before = waited(&sim.snapshot);
    let target = flows()["f"].clone();
    let step = migrate(
        &sim.flow,
        &target,
        2,
        &sim.snapshot,
        &BTreeMap::new(),
        ctx(),
    )
    .unwrap();
    assert_eq!(
        waited(&step.snapshot),
        before,
        "the same park waits for the same child"
    );
    let touched: Vec<&Effect> = (step.effects.iter())
        .filter(|e| {
            matches!(
                e,
                Effect::Arm { .. } | Effect::Disarm(_) | Effect::Call { .. }
            )
        })
        .collect();
    assert!(touched.is_empty(), "the call's rows stay: {touched:?}");
    assert_eq!(step.snapshot.instance.version, 2);
    let step = exec::apply(
        &target,
        &step.snapshot,
        Event::ChildEnded {
            park: before.0,
            child: before.1,
            outcome: ChildOutcome::Completed { reply: Value::Null },
        },
        ctx(),
    )
    .unwrap();
    assert_eq!(step.snapshot.status, Status::Completed);
}
