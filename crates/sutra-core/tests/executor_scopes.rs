//! The executor on scopes (issue 34, `docs/design/time-and-undo.md` §3), step by step: a
//! failure inside a block that nothing inside catches goes to the scope's `on-error` with every
//! token inside torn down in the same step; the innermost scope with a handler catches; the
//! scope's deadline ends the block; a block that ends resolves the deadline's timer.

mod support;

use serde_json::json;
use support::{Sim, task_error};
use sutra_core::snapshot::{ParkSort, Status};
use sutra_core::step::{Disarm, Effect, Event, HistoryKind, Step};

const SCOPES: &str = r#"
name: d
channels:
  orders: { transport: http, correlate: data.id }
  nested: { transport: http, correlate: data.id }
flows:
  f:
    start: { channel: orders }
    nodes:
      - id: payment
        scope:
          nodes:
            - id: both
              parallel:
                - - id: debit
                    task: { topic: debit }
                - - id: credit
                    task: { topic: credit }
            - id: ship
              call: { flow: shipping }
        on-error: undo
        deadline: { after: PT10M, next: late }
      - id: done
        end: { reply: done }
      - id: undo
        end: { reply: "= vars.error" }
      - id: late
        end: { reply: late }
  nested:
    start: { channel: nested }
    nodes:
      - id: outer
        scope:
          nodes:
            - id: inner
              scope:
                nodes:
                  - id: work
                    task: { topic: work }
      - id: done
        end: { reply: done }
  shipping:
    nodes:
      - id: book
        task: { topic: book }
"#;

fn sim(flow: &str) -> Sim {
    Sim::checked(SCOPES, flow)
}

fn disarmed(step: &Step) -> Vec<Disarm> {
    (step.effects.iter())
        .filter_map(|effect| match effect {
            Effect::Disarm(disarm) => Some(*disarm),
            _ => None,
        })
        .collect()
}

fn kinds(step: &Step) -> Vec<HistoryKind> {
    step.history.iter().map(|event| event.kind).collect()
}

#[test]
fn a_failure_in_one_branch_withdraws_the_other_and_goes_to_the_scopes_on_error() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    let (debit, credit) = (sim.park("debit"), sim.park("credit"));
    let step = sim.ok(Event::TaskFailed {
        park: debit,
        error: task_error("NO.FUNDS", "insufficient"),
    });
    assert_eq!(
        step.snapshot.status,
        Status::Completed,
        "{:?}",
        step.snapshot
    );
    assert_eq!(
        step.snapshot.reply,
        json!({"code": "NO.FUNDS", "message": "insufficient", "node": "debit"})
    );
    let disarms = disarmed(&step);
    assert!(
        disarms.contains(&Disarm {
            park: credit,
            sort: ParkSort::Task
        }),
        "the other branch's task is withdrawn: {disarms:?}"
    );
    assert!(
        disarms.iter().any(|d| d.sort == ParkSort::Wait),
        "the scope's deadline is disarmed: {disarms:?}"
    );
    assert!(
        kinds(&step).contains(&HistoryKind::ErrorCaught),
        "{:?}",
        kinds(&step)
    );
    assert!(!kinds(&step).contains(&HistoryKind::Failed));
}

#[test]
fn the_scopes_deadline_ends_its_block_and_cancels_the_child_it_waits_for() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    for (node, output) in [("debit", "d"), ("credit", "c")] {
        let park = sim.park(node);
        sim.ok(Event::TaskCompleted {
            park,
            output: json!(output),
        });
    }
    let ship = sim.park("ship");
    let timer = (sim.snapshot.tokens.iter())
        .find(|t| t.role.is_some())
        .and_then(|t| t.park())
        .expect("the deadline's timer")
        .id;
    let step = sim.ok(Event::TimerFired { park: timer });
    assert_eq!(step.snapshot.reply, json!("late"));
    assert!(
        disarmed(&step).contains(&Disarm {
            park: ship,
            sort: ParkSort::Call
        }),
        "resolving the call's park cancels its child: {:?}",
        step.effects
    );
    assert!(kinds(&step).contains(&HistoryKind::DeadlineFired));
}

#[test]
fn a_block_that_ends_resolves_the_deadline_and_goes_on() {
    let mut sim = sim("f");
    sim.start(json!({"id": "o1"}));
    for (node, output) in [("debit", "d"), ("credit", "c")] {
        let park = sim.park(node);
        sim.ok(Event::TaskCompleted {
            park,
            output: json!(output),
        });
    }
    let (park, child) = {
        let parked = sim
            .snapshot
            .tokens
            .iter()
            .find(|t| t.node == "ship")
            .unwrap();
        let park = parked.park().unwrap();
        let sutra_core::snapshot::ParkKind::Call { child, .. } = &park.kind else {
            panic!("a call")
        };
        (park.id, child.clone())
    };
    let step = sim.ok(Event::ChildEnded {
        park,
        child,
        outcome: sutra_core::step::ChildOutcome::Completed { reply: json!(null) },
    });
    assert_eq!(step.snapshot.reply, json!("done"));
    assert!(
        disarmed(&step).iter().any(|d| d.sort == ParkSort::Wait),
        "the deadline's timer goes with its block: {:?}",
        step.effects
    );
}

#[test]
fn without_a_handler_around_it_a_failure_fails_the_instance() {
    let mut sim = sim("nested");
    sim.start(json!({"id": "n1"}));
    let park = sim.park("work");
    let step = sim.ok(Event::TaskFailed {
        park,
        error: task_error("BROKEN", "no"),
    });
    assert_eq!(step.snapshot.status, Status::Failed);
    let failure = step.snapshot.failure.as_ref().expect("a failure");
    assert_eq!(
        (failure.code.as_str(), failure.node.as_deref()),
        ("BROKEN", Some("work"))
    );

    // Restored, the task is offered again inside both scopes.
    let restored = sim.ok(Event::Restore);
    assert_eq!(restored.snapshot.status, Status::Suspended);
    let park = sim.park("work");
    let done = sim.ok(Event::TaskCompleted {
        park,
        output: json!(1),
    });
    assert_eq!(done.snapshot.reply, json!("done"));
}

#[test]
fn the_innermost_scope_with_a_handler_catches() {
    let yaml = SCOPES.replace(
        "                  - id: work\n                    task: { topic: work }\n",
        "                  - id: work\n                    task: { topic: work }\n              on-error: inner-caught\n            - id: inner-caught\n              set: { caught: inner }\n        on-error: outer-caught\n",
    )
    .replace(
        "      - id: done\n        end: { reply: done }\n  shipping:",
        "      - id: done\n        end: { reply: \"= vars.caught\" }\n      - id: outer-caught\n        end: { reply: outer }\n  shipping:",
    );
    let mut sim = Sim::checked(&yaml, "nested");
    sim.start(json!({"id": "n1"}));
    let park = sim.park("work");
    let step = sim.ok(Event::TaskFailed {
        park,
        error: task_error("BROKEN", "no"),
    });
    assert_eq!(step.snapshot.reply, json!("inner"), "{:?}", step.history);
}
