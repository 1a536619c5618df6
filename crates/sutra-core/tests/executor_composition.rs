//! The executor on races, deadlines and reminders (decision 0050), step by step: which parks a
//! step arms and disarms, where the tokens go, and that restore and migration leave exactly one
//! set of satellites. The flows are read by the checker (their YAML is the clearest statement of
//! them); the simulator is the executor tests' own.

mod support;

use std::collections::BTreeMap;

use serde_json::json;
use support::{Sim, checked_flows, ctx, message, now, task_error};
use sutra_core::exec::migrate;
use sutra_core::model::Flow;
use sutra_core::snapshot::{ParkKind, ParkSort, Role, Status, TokenState};
use sutra_core::step::{Disarm, Effect, Event, HistoryKind, Rejection};

fn flow(yaml: &str) -> Flow {
    checked_flows(yaml)["f"].clone()
}

fn sim(yaml: &str) -> Sim {
    Sim::checked(yaml, "f")
}

const RACE: &str = r#"
name: d
channels:
  orders: { transport: http, correlate: data.id }
  payments: { transport: http, correlate: data.order }
  cancellations: { transport: http, correlate: data.order }
flows:
  f:
    start: { channel: orders }
    nodes:
      - id: settle
        race:
          - receive: { channel: payments, key: vars.input.id }
            output: payment
            next: paid
          - receive: { channel: cancellations, key: vars.input.key }
            next: cancelled
          - wait: { duration: PT1H }
            next: expired
      - id: paid
        end: { reply: paid }
      - id: cancelled
        end: { reply: cancelled }
      - id: expired
        end: { reply: expired }
"#;

const WAITING: &str = r#"
name: d
channels:
  orders: { transport: http, correlate: data.id }
flows:
  f:
    start: { channel: orders }
    nodes:
      - id: approve
        task: { topic: approve, input: { order: "= vars.input.id" } }
        output: decision
        deadline: { after: PT2H, next: escalate }
        remind:
          after: PT30M
          every: PT30M
          nodes:
            - id: nudge
              set: { nudged: "= true" }
      - id: approved
        end: { reply: approved }
      - id: escalate
        end: { reply: escalated }
"#;

/// The instance of `sim` migrated onto `target` as version 2, its nodes mapped by id.
fn migrated(sim: &Sim, target: &Flow) -> sutra_core::step::Step {
    migrate(&sim.flow, target, 2, &sim.snapshot, &BTreeMap::new(), ctx())
        .expect("the migration fits")
}

/// The parks a step armed, in order.
fn armed(effects: &[Effect]) -> Vec<ParkKind> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Arm { park, .. } => Some(park.kind.clone()),
            _ => None,
        })
        .collect()
}

fn disarmed(effects: &[Effect]) -> Vec<Disarm> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::Disarm(disarm) => Some(*disarm),
            _ => None,
        })
        .collect()
}

fn kinds(step: &sutra_core::step::Step) -> Vec<HistoryKind> {
    step.history.iter().map(|event| event.kind).collect()
}

#[test]
fn a_race_arms_every_arm_in_one_step_and_the_winner_disarms_the_others() {
    let mut sim = sim(RACE);
    let step = sim.start(json!({"id": "o1", "key": "k1"}));
    assert_eq!(armed(&step.effects).len(), 3);
    let host = &sim.snapshot.tokens[0];
    assert_eq!(host.state, TokenState::Racing);
    let arms: Vec<_> = sim.snapshot.tokens[1..]
        .iter()
        .map(|t| (t.role, t.parent))
        .collect();
    let racer = Some(host.id);
    assert_eq!(
        arms,
        [0, 1, 2].map(|index| (Some(Role::Arm { index }), racer))
    );

    let cancellation = sim.snapshot.tokens[2].park().unwrap().id;
    let step = sim.ok(Event::Relay {
        park: cancellation,
        message: message("c1", json!({"order": "k1"})),
    });
    assert_eq!(sim.snapshot.status, Status::Completed);
    assert_eq!(sim.snapshot.reply, json!("cancelled"));
    let sorts: Vec<ParkSort> = disarmed(&step.effects).iter().map(|d| d.sort).collect();
    assert_eq!(
        sorts,
        [ParkSort::Receive, ParkSort::Wait],
        "the two losing arms, not the winner"
    );
    assert!(kinds(&step).contains(&HistoryKind::RaceWon));
    assert!(sim.snapshot.vars.get("payment").is_none());
}

#[test]
fn a_late_answer_to_a_losing_arm_is_stale() {
    let mut sim = sim(RACE);
    sim.start(json!({"id": "o1", "key": "k1"}));
    let (payment, timer) = (
        sim.snapshot.tokens[1].park().unwrap().id,
        sim.snapshot.tokens[3].park().unwrap().id,
    );
    sim.ok(Event::TimerFired { park: timer });
    assert_eq!(sim.snapshot.reply, json!("expired"));
    let late = sim.apply(Event::Relay {
        park: payment,
        message: message("p1", json!({"order": "o1"})),
    });
    assert_eq!(late, Err(Rejection::Stale(Some(payment))));
}

#[test]
fn two_arms_on_one_key_fail_the_instance_before_anything_is_armed() {
    let mut sim = sim(&RACE.replace(
        "channel: cancellations, key: vars.input.key",
        "channel: payments, key: vars.input.key",
    ));
    let step = sim.start(json!({"id": "same", "key": "same"}));
    assert_eq!(sim.snapshot.status, Status::Failed);
    let failure = sim.snapshot.failure.clone().unwrap();
    assert_eq!(failure.code, "SUTRA.RUNTIME.CORRELATION.ALIAS_TAKEN");
    assert!(armed(&step.effects).is_empty(), "{:?}", step.effects);
    assert_eq!(sim.snapshot.tokens.len(), 1, "no arm was made");
}

#[test]
fn a_deadline_is_the_task_parks_own_timer_and_ends_the_wait_when_it_fires() {
    let mut sim = sim(WAITING);
    let step = sim.start(json!({"id": "o1"}));
    let ParkKind::Task { due, .. } = &armed(&step.effects)[0] else {
        panic!("a task park first: {:?}", step.effects);
    };
    assert_eq!(*due, Some(now() + jiff::SignedDuration::from_hours(2)));
    let task = sim.park("approve");
    let step = sim.ok(Event::TimerFired { park: task });
    assert_eq!(sim.snapshot.reply, json!("escalated"));
    assert!(kinds(&step).contains(&HistoryKind::DeadlineFired));
    // The answered park's rows are the delivery's to consume; the reminder's timer is disarmed.
    let sorts: Vec<ParkSort> = disarmed(&step.effects).iter().map(|d| d.sort).collect();
    assert_eq!(sorts, [ParkSort::Wait]);
    let late = sim.apply(Event::TaskCompleted {
        park: task,
        output: json!({}),
    });
    assert_eq!(late, Err(Rejection::Stale(Some(task))));
}

#[test]
fn a_reminder_runs_its_nodes_beside_the_wait_and_rearms_until_the_wait_ends() {
    let mut sim = sim(WAITING);
    sim.start(json!({"id": "o1"}));
    let task = sim.park("approve");
    for fired in 1..=2 {
        let reminder = sim
            .snapshot
            .tokens
            .iter()
            .find(|t| matches!(t.role, Some(Role::Reminder { .. })))
            .unwrap();
        let park = reminder.park().unwrap().id;
        let step = sim.ok(Event::TimerFired { park });
        assert_eq!(sim.snapshot.status, Status::Suspended);
        assert!(kinds(&step).contains(&HistoryKind::Reminded));
        assert_eq!(sim.snapshot.vars["nudged"], json!(true));
        let roles: Vec<_> = sim.snapshot.tokens.iter().map(|t| t.role).collect();
        assert_eq!(
            roles,
            [None, Some(Role::Reminder { fired })],
            "the nudge ran and ended"
        );
        assert_eq!(
            sim.park("approve"),
            task,
            "the wait goes on, on its own park"
        );
        assert!(matches!(armed(&step.effects)[..], [ParkKind::Wait { .. }]));
    }
    let step = sim.ok(Event::TaskCompleted {
        park: task,
        output: json!("yes"),
    });
    assert_eq!(sim.snapshot.reply, json!("approved"));
    assert_eq!(disarmed(&step.effects).len(), 1, "the reminder's timer");
}

#[test]
fn restore_arms_one_reminder_for_the_node_it_runs_again() {
    let mut sim = sim(WAITING);
    sim.start(json!({"id": "o1"}));
    let task = sim.park("approve");
    sim.ok(Event::TaskFailed {
        park: task,
        error: task_error("NOPE", "refused"),
    });
    assert_eq!(sim.snapshot.status, Status::Failed);
    sim.ok(Event::Restore);
    let reminders = sim
        .snapshot
        .tokens
        .iter()
        .filter(|t| matches!(t.role, Some(Role::Reminder { .. })))
        .count();
    assert_eq!(reminders, 1, "{:?}", sim.snapshot.tokens);
    assert_ne!(
        sim.park("approve"),
        task,
        "the task is offered again on a new park"
    );
}

#[test]
fn migration_arms_the_races_arms_afresh_on_the_target() {
    let mut sim = sim(RACE);
    sim.start(json!({"id": "o1", "key": "k1"}));
    let before: Vec<_> = sim.snapshot.parks().map(|p| p.id).collect();
    let target = flow(&RACE.replace("PT1H", "PT2H"));
    let step = migrated(&sim, &target);
    assert_eq!(disarmed(&step.effects).len(), 3, "the old arms");
    assert_eq!(armed(&step.effects).len(), 3, "the target's arms");
    let after: Vec<_> = step.snapshot.parks().map(|p| p.id).collect();
    assert_eq!(after.len(), 3);
    assert!(after.iter().all(|park| !before.contains(park)));
    assert_eq!(
        step.snapshot
            .tokens
            .iter()
            .filter(|t| t.state == TokenState::Racing)
            .count(),
        1
    );
}

const LOOP: &str = r#"
name: d
channels:
  orders: { transport: http, correlate: data.id }
flows:
  f:
    start: { channel: orders }
    nodes:
      - id: each
        for-each:
          items: "= vars.input.items"
          as: line
          concurrency: 2
          task: { topic: reserve, input: { sku: "= line", at: "= index" } }
        output: reserved
        on-error: short
      - id: done
        end: { reply: "= vars.reserved" }
      - id: short
        end: { reply: "= vars.error" }
"#;

/// The task park of the body for item `index`.
fn body_park(sim: &Sim, index: u32) -> sutra_core::snapshot::ParkId {
    sim.snapshot
        .tokens
        .iter()
        .find(|t| t.role == Some(Role::Body { index }))
        .and_then(|t| t.park())
        .unwrap_or_else(|| panic!("no body for item {index}: {:?}", sim.snapshot.tokens))
        .id
}

fn inputs(effects: &[Effect]) -> Vec<serde_json::Value> {
    armed(effects)
        .into_iter()
        .filter_map(|kind| match kind {
            ParkKind::Task { input, .. } => Some(input),
            _ => None,
        })
        .collect()
}

#[test]
fn a_loop_starts_concurrency_bodies_and_the_next_as_each_ends_in_item_order() {
    let mut sim = sim(LOOP);
    let step = sim.start(json!({"id": "o1", "items": ["a", "b", "c", "d"]}));
    assert_eq!(
        inputs(&step.effects),
        [json!({"sku": "a", "at": 0}), json!({"sku": "b", "at": 1})]
    );
    let step = sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 1),
        output: json!("B"),
    });
    assert_eq!(inputs(&step.effects), [json!({"sku": "c", "at": 2})]);
    let step = sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 2),
        output: json!("C"),
    });
    assert_eq!(inputs(&step.effects), [json!({"sku": "d", "at": 3})]);
    sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 3),
        output: json!("D"),
    });
    assert_eq!(sim.snapshot.status, Status::Suspended);
    sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 0),
        output: json!("A"),
    });
    assert_eq!(
        sim.snapshot.reply,
        json!(["A", "B", "C", "D"]),
        "results in item order"
    );
}

#[test]
fn a_failing_body_withdraws_the_others_and_goes_to_on_error_with_its_index() {
    let mut sim = sim(LOOP);
    sim.start(json!({"id": "o1", "items": ["a", "b", "c"]}));
    let other = body_park(&sim, 0);
    let step = sim.ok(Event::TaskFailed {
        park: body_park(&sim, 1),
        error: task_error("NONE", "sold out"),
    });
    assert_eq!(
        sim.snapshot.reply,
        json!({"code": "NONE", "message": "sold out", "index": 1})
    );
    assert_eq!(
        disarmed(&step.effects),
        [Disarm {
            park: other,
            sort: ParkSort::Task
        }]
    );
}

#[test]
fn without_on_error_a_failing_body_fails_the_instance_and_restore_runs_that_body_again() {
    let mut sim = sim(&LOOP.replace("        on-error: short\n", ""));
    sim.start(json!({"id": "o1", "items": ["a", "b", "c"]}));
    sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 0),
        output: json!("A"),
    });
    sim.ok(Event::TaskExhausted {
        park: body_park(&sim, 1),
        error: task_error("DOWN", "no stock service"),
    });
    assert_eq!(sim.snapshot.status, Status::Failed);
    let step = sim.ok(Event::Restore);
    let mut again = inputs(&step.effects);
    again.sort_by_key(|input| input["at"].as_u64());
    assert_eq!(
        again,
        [json!({"sku": "b", "at": 1}), json!({"sku": "c", "at": 2})]
    );
    for index in [1, 2] {
        let park = body_park(&sim, index);
        sim.ok(Event::TaskCompleted {
            park,
            output: json!(index),
        });
    }
    assert_eq!(sim.snapshot.reply, json!(["A", 1, 2]));
}

#[test]
fn a_fan_out_of_a_thousand_items_is_one_visit_of_its_node() {
    let mut sim = sim(&LOOP.replace("concurrency: 2", "concurrency: 1000"));
    sim.ctx.transitions_max = 3;
    let items: Vec<serde_json::Value> = (0..1000).map(|n| json!(n)).collect();
    let step = sim.start(json!({"id": "o1", "items": items}));
    assert_eq!(
        sim.snapshot.status,
        Status::Suspended,
        "{:?}",
        sim.snapshot.failure
    );
    assert_eq!(inputs(&step.effects).len(), 1000);
}

#[test]
fn migration_keeps_the_loops_results_and_offers_its_running_bodies_again() {
    let mut sim = sim(LOOP);
    sim.start(json!({"id": "o1", "items": ["a", "b", "c"]}));
    sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 0),
        output: json!("A"),
    });
    let target = flow(&LOOP.replace("topic: reserve,", "topic: reserve-v2,"));
    let step = migrated(&sim, &target);
    let topics: Vec<String> = armed(&step.effects)
        .into_iter()
        .filter_map(|kind| match kind {
            ParkKind::Task { topic, .. } => Some(topic),
            _ => None,
        })
        .collect();
    assert_eq!(
        topics,
        ["reserve-v2", "reserve-v2"],
        "the running bodies, items 1 and 2"
    );
    let TokenState::Looping { results, .. } = &step.snapshot.tokens[0].state else {
        panic!("still looping: {:?}", step.snapshot.tokens);
    };
    assert_eq!(results[0], json!("A"));
}

#[test]
fn a_loops_deadline_withdraws_its_bodies_and_resolves_its_reminder() {
    let yaml = LOOP
        .replace(
            "        on-error: short\n",
            "        on-error: short\n        deadline: { after: PT1H, next: late }\n        remind: { after: PT10M }\n",
        )
        .replace("      - id: short\n", "      - id: late\n        end: { reply: late }\n      - id: short\n");
    let mut sim = sim(&yaml);
    sim.start(json!({"id": "o1", "items": ["a", "b", "c"]}));
    let roles: Vec<_> = sim.snapshot.tokens.iter().map(|t| t.role).collect();
    assert_eq!(
        roles,
        [
            None,
            Some(Role::Body { index: 0 }),
            Some(Role::Body { index: 1 }),
            Some(Role::Deadline),
            Some(Role::Reminder { fired: 0 })
        ]
    );
    let timer = sim.snapshot.tokens[3].park().unwrap().id;
    let step = sim.ok(Event::TimerFired { park: timer });
    assert_eq!(sim.snapshot.reply, json!("late"));
    let sorts: Vec<ParkSort> = disarmed(&step.effects).iter().map(|d| d.sort).collect();
    assert_eq!(
        sorts,
        [ParkSort::Task, ParkSort::Task, ParkSort::Wait],
        "two bodies and the reminder"
    );
    assert!(kinds(&step).contains(&HistoryKind::DeadlineFired));
}

#[test]
fn a_loop_that_ends_resolves_its_timers_and_migration_keeps_them() {
    let yaml = LOOP.replace(
        "        on-error: short\n",
        "        on-error: short\n        deadline: { after: PT1H, next: short }\n",
    );
    let mut sim = sim(&yaml);
    sim.start(json!({"id": "o1", "items": ["a"]}));
    let step = migrated(&sim, &flow(&yaml));
    let timers: Vec<_> = step
        .snapshot
        .tokens
        .iter()
        .filter(|t| t.role == Some(Role::Deadline))
        .collect();
    assert_eq!(timers.len(), 1, "{:?}", step.snapshot.tokens);
    let due = |kind: &ParkKind| kind.due();
    assert_eq!(
        due(&timers[0].park().unwrap().kind),
        Some(now() + jiff::SignedDuration::from_hours(1)),
        "kept with its due"
    );
    sim.snapshot = step.snapshot;
    let step = sim.ok(Event::TaskCompleted {
        park: body_park(&sim, 0),
        output: json!("A"),
    });
    assert_eq!(sim.snapshot.reply, json!(["A"]));
    assert_eq!(
        disarmed(&step.effects)
            .iter()
            .map(|d| d.sort)
            .collect::<Vec<_>>(),
        [ParkSort::Wait]
    );
}
