//! Properties of the executor over random flows and random event sequences.
//!
//! Flows mix every node kind, jump to random nodes of their own list (so they loop), nest
//! parallels and scopes (whose `on-error` catches what fails inside), and guard choices with expressions that are true, false, erroring or not boolean.
//! Events answer live parks with the right or the wrong kind of event, name parks that do not
//! exist, cancel and restore. After every event the invariants of ARCHITECTURE.md must hold.

mod support;

use std::collections::BTreeSet;

use proptest::prelude::*;
use serde_json::json;
use support::*;
use sutra_core::exec::apply;
use sutra_core::model::Flow;
use sutra_core::snapshot::{Park, ParkId, ParkKind, Snapshot, Status, TokenState};
use sutra_core::step::{Disarm, Effect, Event, Rejection, Reply, Step, StepContext};

/// A budget no random flow needs unless it loops without parking.
const BUDGET_LARGE: u32 = 400;

// Each list ends with expressions that fail at run time: an error, or a guard that is no boolean.
const GUARDS: &[&str] = &[
    "vars.x > 2",
    "vars.x % 2 == 0",
    "vars.x < 3",
    "true",
    "false",
    "vars.nope.y",
    "vars.x",
];
const SETS: &[&str] = &[
    "= vars.x + 1",
    "= vars.x - 1",
    "= 0",
    "= vars.x * 2",
    "= vars.nope.z",
];
const KEYS: &[&str] = &["'k'", "vars.x", "string(vars.x)", "vars.nope"];

/// A generated node; targets are indices into its own list, taken modulo the list's length.
#[derive(Debug, Clone)]
struct Gen {
    kind: GenKind,
    next: Option<u8>,
    on_error: Option<u8>,
}

#[derive(Debug, Clone)]
enum GenKind {
    Set(usize),
    Task,
    Emit(bool),
    /// A key from `KEYS`, and maybe a timeout with maybe an `on-timeout` target.
    Receive(usize, Option<Option<u8>>),
    Wait(bool),
    Choice(Vec<(usize, u8)>, Option<u8>),
    Parallel(Vec<Vec<Gen>>),
    /// A block; the node's `on-error`, when generated, catches what fails inside.
    Scope(Vec<Gen>),
    End(bool),
    Fail,
}

fn target() -> impl Strategy<Value = Option<u8>> {
    proptest::option::weighted(0.15, any::<u8>())
}

fn gen_node() -> impl Strategy<Value = Gen> {
    let leaf = prop_oneof![
        3 => (0..SETS.len()).prop_map(GenKind::Set),
        3 => Just(GenKind::Task),
        1 => any::<bool>().prop_map(GenKind::Emit),
        3 => (0..KEYS.len(), proptest::option::of(target()))
            .prop_map(|(key, timeout)| GenKind::Receive(key, timeout)),
        2 => any::<bool>().prop_map(GenKind::Wait),
        2 => (proptest::collection::vec((0..GUARDS.len(), any::<u8>()), 0..3), target())
            .prop_map(|(arms, otherwise)| GenKind::Choice(arms, otherwise)),
        1 => any::<bool>().prop_map(GenKind::End),
        1 => Just(GenKind::Fail),
    ];
    let node = |kind: BoxedStrategy<GenKind>| {
        (kind, target(), target()).prop_map(|(kind, next, on_error)| Gen {
            kind,
            next,
            on_error,
        })
    };
    node(leaf.boxed()).prop_recursive(2, 24, 3, move |inner| {
        let branches =
            proptest::collection::vec(proptest::collection::vec(inner.clone(), 0..4), 0..3);
        let block = proptest::collection::vec(inner.clone(), 0..4);
        prop_oneof![
            3 => inner,
            1 => node(branches.prop_map(GenKind::Parallel).boxed()),
            1 => node(block.prop_map(GenKind::Scope).boxed()),
        ]
    })
}

/// Builds the flow: `init` copies `vars.input.x` to `vars.x`, then the generated list follows.
fn build(nodes: &[Gen]) -> Flow {
    let mut counter = 0;
    let mut list = vec![set("init", &[("x", json!("= vars.input.x"))])];
    list.extend(to_nodes(nodes, &mut counter));
    flow(list)
}

fn to_nodes(list: &[Gen], counter: &mut usize) -> Vec<N> {
    let ids: Vec<String> = list
        .iter()
        .map(|_| {
            *counter += 1;
            format!("n{counter}")
        })
        .collect();
    let pick = |i: u8| ids[i as usize % ids.len()].as_str();
    list.iter()
        .zip(&ids)
        .map(|(g, id)| {
            let mut n = match &g.kind {
                GenKind::Set(i) => set(id, &[("x", json!(SETS[*i]))]),
                GenKind::Task => task(id, "topic", json!({"x": "= vars.x"})).output("x"),
                GenKind::Emit(keyed) => {
                    let e = emit(id, "out", json!("= vars.x"));
                    if *keyed { e.key("string(vars.x)") } else { e }
                }
                GenKind::Receive(key, timeout) => {
                    let r = receive(id, "c", KEYS[*key]).output("x");
                    match timeout {
                        Some(on_timeout) => r.timeout(5, on_timeout.map(pick)),
                        None => r,
                    }
                }
                GenKind::Wait(true) => wait_for(id, 5),
                GenKind::Wait(false) => wait_until(id, "now + duration('1h')"),
                GenKind::Choice(arms, otherwise) => {
                    let arms: Vec<(&str, &str)> =
                        arms.iter().map(|(g, t)| (GUARDS[*g], pick(*t))).collect();
                    choice(id, &arms, otherwise.map(pick))
                }
                GenKind::Parallel(branches) => {
                    parallel(id, branches.iter().map(|b| to_nodes(b, counter)).collect())
                }
                GenKind::Scope(block) => scope(id, to_nodes(block, counter)),
                GenKind::End(reply) => end(id, reply.then(|| json!("= vars.x"))),
                GenKind::Fail => fail(id, "FLOW.FAILED", Some(json!("= 'x is ' + string(vars.x)"))),
            };
            if let Some(t) = g.next {
                n = n.next(pick(t));
            }
            if let Some(t) = g.on_error {
                n = n.on_error(pick(t));
            }
            n
        })
        .collect()
}

/// A generated event, read against the snapshot it is applied to.
#[derive(Debug, Clone)]
enum Action {
    /// Answers the `pick`-th live park; `matching` chooses an answer its kind waits for.
    Answer {
        pick: u8,
        kind: u8,
        matching: bool,
    },
    /// Answers a park id that may or may not exist.
    Any {
        park: u8,
        kind: u8,
    },
    Cancel,
    Restore,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        12 => (any::<u8>(), any::<u8>(), proptest::bool::weighted(0.8))
            .prop_map(|(pick, kind, matching)| Action::Answer { pick, kind, matching }),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(park, kind)| Action::Any { park, kind }),
        1 => Just(Action::Cancel),
        3 => Just(Action::Restore),
    ]
}

fn answer(park: ParkId, kind: u8) -> Event {
    let error = task_error("W.ERR", "worker error");
    match kind % 5 {
        0 => Event::Relay {
            park,
            message: message("m", json!(kind)),
        },
        1 => Event::TimerFired { park },
        2 => Event::TaskCompleted {
            park,
            output: json!(kind),
        },
        3 => Event::TaskFailed { park, error },
        _ => Event::TaskExhausted { park, error },
    }
}

/// An answer that a park of this kind waits for; most tasks succeed, so that flows get far.
fn matching_answer(park: &Park, kind: u8) -> Event {
    let kind = match park.kind {
        ParkKind::Receive { due: Some(_), .. } => kind % 2,
        ParkKind::Receive { due: None, .. } => 0,
        ParkKind::Wait { .. } => 1,
        ParkKind::Task { .. } => [2, 2, 2, 3, 4][usize::from(kind % 5)],
        // The generated flows call no other flow: a child's end is never asked for here.
        ParkKind::Call { .. } => 1,
    };
    answer(park.id, kind)
}

fn event(action: &Action, snapshot: &Snapshot) -> Event {
    let parks: Vec<&Park> = snapshot.parks().collect();
    match action {
        Action::Answer {
            pick,
            kind,
            matching,
        } if !parks.is_empty() => {
            let park = parks[*pick as usize % parks.len()];
            if *matching {
                matching_answer(park, *kind)
            } else {
                answer(park.id, *kind)
            }
        }
        Action::Answer { pick, kind, .. } | Action::Any { park: pick, kind } => {
            answer(ParkId(u64::from(*pick % 16)), *kind)
        }
        Action::Cancel => Event::Cancel { reason: None },
        Action::Restore => Event::Restore,
    }
}

/// Whether `event` is one the executor must accept on `snapshot`, decided independently of it.
fn acceptable(event: &Event, snapshot: &Snapshot) -> bool {
    match event {
        Event::Start { .. } => snapshot.status == Status::Created,
        Event::Cancel { .. } => matches!(snapshot.status, Status::Suspended | Status::Failed),
        Event::Restore => snapshot.status == Status::Failed,
        answer => {
            let park = answer
                .park()
                .and_then(|id| snapshot.parks().find(|p| p.id == id));
            snapshot.status == Status::Suspended && park.is_some_and(|p| answers(answer, &p.kind))
        }
    }
}

fn answers(event: &Event, kind: &ParkKind) -> bool {
    match (event, kind) {
        (Event::Relay { .. }, ParkKind::Receive { .. }) => true,
        (Event::TimerFired { .. }, ParkKind::Receive { due, .. }) => due.is_some(),
        (Event::TimerFired { .. }, ParkKind::Wait { .. }) => true,
        (
            Event::TaskCompleted { .. } | Event::TaskFailed { .. } | Event::TaskExhausted { .. },
            ParkKind::Task { .. },
        ) => true,
        _ => false,
    }
}

fn check_step(before: &Snapshot, step: &Step) -> Result<(), TestCaseError> {
    let after = &step.snapshot;
    // History continues the audit sequence without gaps.
    prop_assert!(!step.history.is_empty());
    for (i, event) in step.history.iter().enumerate() {
        prop_assert_eq!(event.seq, before.audit_seq + 1 + i as u64);
    }
    prop_assert_eq!(
        after.audit_seq,
        before.audit_seq + step.history.len() as u64
    );

    // Quiescence, and a failure recorded exactly when the instance is failed.
    match after.status {
        Status::Suspended => {
            prop_assert!(
                !after.tokens.is_empty(),
                "a live instance with no token can never move"
            );
            for token in &after.tokens {
                let quiet = matches!(
                    token.state,
                    TokenState::Parked(_) | TokenState::Joining { pending: 1.. }
                );
                prop_assert!(quiet, "token {:?} is not at rest", token);
            }
        }
        Status::Completed | Status::Cancelled => prop_assert!(after.tokens.is_empty()),
        Status::Failed => prop_assert!(after.failure.is_some()),
        Status::Created => prop_assert!(false, "a step never leaves an instance created"),
    }
    prop_assert_eq!(after.failure.is_some(), after.status == Status::Failed);
    let expected_reply = match (&after.status, &after.failure) {
        (Status::Completed, _) => matches!(step.reply, Some(Reply::Completed(_))),
        (Status::Cancelled, _) => step.reply == Some(Reply::Cancelled),
        (Status::Failed, Some(f)) if before.status != Status::Failed => {
            matches!(&step.reply, Some(Reply::Failed { code, .. }) if *code == f.code)
        }
        (Status::Failed, _) => matches!(step.reply, Some(Reply::Failed { .. })),
        _ => step.reply.is_none(),
    };
    prop_assert!(
        expected_reply,
        "reply {:?} for {:?}",
        step.reply,
        after.status
    );
    // The reply is the one the snapshot it leaves rebuilds: a replica that did not run the step
    // answers a caller held on it alike (decision 0024).
    if step.reply.is_some() {
        prop_assert_eq!(&Reply::of_ended(after), &step.reply);
    }

    // Tokens: ids unique and ordered, counters ahead of every id, joins count their children.
    let ids: Vec<u64> = after.tokens.iter().map(|t| t.id.0).collect();
    prop_assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "tokens out of order: {:?}",
        ids
    );
    prop_assert!(ids.iter().all(|&id| id < after.next_token));
    let parks: Vec<ParkId> = after.parks().map(|p| p.id).collect();
    prop_assert_eq!(
        parks.iter().collect::<BTreeSet<_>>().len(),
        parks.len(),
        "park ids unique"
    );
    prop_assert!(parks.iter().all(|p| p.0 < after.next_park));
    for token in &after.tokens {
        let children = after
            .tokens
            .iter()
            .filter(|t| t.parent == Some(token.id))
            .count();
        match token.state {
            TokenState::Joining { pending } => prop_assert_eq!(pending as usize, children),
            _ => prop_assert_eq!(children, 0),
        }
    }

    // Arms name parks the new snapshot holds, fresh ones, and only while it lives; disarms name
    // parks the old one held.
    if after.status != Status::Suspended {
        prop_assert!(
            !step.effects.iter().any(|e| matches!(e, Effect::Arm { .. })),
            "armed a park of an ended instance"
        );
    }
    for effect in &step.effects {
        match effect {
            Effect::Arm { token, node, park } => {
                let holder = after.token_parked_on(park.id);
                prop_assert!(
                    holder.is_some_and(|t| t.id == *token
                        && &t.node == node
                        && t.park() == Some(park)),
                    "armed park {:?} is not in the snapshot",
                    park
                );
                prop_assert!(park.id.0 >= before.next_park, "an armed park id is fresh");
            }
            Effect::Call { park, .. } => prop_assert!(
                after.parks().any(|p| p.id == *park),
                "a child is called for park {:?}, which the snapshot does not hold",
                park
            ),
            // Only a called instance answers a caller, and the generated flows call none.
            Effect::Answer { .. } => prop_assert!(before.instance.parent.is_some()),
            Effect::Disarm(disarm) => {
                prop_assert!(
                    before.parks().any(|p| Disarm::of(p) == *disarm),
                    "disarmed park {:?} was not held, or not of that kind",
                    disarm
                );
                prop_assert_eq!(
                    before.status,
                    Status::Suspended,
                    "only live parks have rows to disarm"
                );
            }
            Effect::Emit {
                idempotency_key, ..
            } => {
                let seq: u64 = idempotency_key.split(':').nth(1).unwrap().parse().unwrap();
                prop_assert!(step.history.iter().any(|h| h.seq == seq));
            }
        }
    }

    // The snapshot survives its own persistence.
    prop_assert_eq!(&Snapshot::from_json(after.to_json()).unwrap(), after);
    Ok(())
}

/// A smaller budget changes a step only by failing it with `BUDGET_EXCEEDED`.
fn check_budget(small: &Step, large: &Step) -> Result<(), TestCaseError> {
    if small != large {
        let code = small.snapshot.failure.as_ref().map(|f| f.code.as_str());
        prop_assert_eq!(code, Some("SUTRA.RUNTIME.STEP.BUDGET_EXCEEDED"));
    }
    Ok(())
}

/// Applies `event` under `budget`, checks every invariant, and moves `snapshot` on if accepted.
fn drive(
    flow: &Flow,
    snapshot: &mut Snapshot,
    event: Event,
    budget: u32,
) -> Result<(), TestCaseError> {
    let small = StepContext {
        transitions_max: budget,
        ..ctx()
    };
    let accepted = acceptable(&event, snapshot);
    let outcome = apply(flow, snapshot, event.clone(), small);
    prop_assert_eq!(
        &outcome,
        &apply(flow, snapshot, event.clone(), small),
        "deterministic"
    );
    match outcome {
        Ok(step) => {
            prop_assert!(accepted, "{:?} accepted on {:?}", event, snapshot.status);
            check_step(snapshot, &step)?;
            let large = StepContext {
                transitions_max: BUDGET_LARGE,
                ..ctx()
            };
            check_budget(&step, &apply(flow, snapshot, event, large).unwrap())?;
            *snapshot = step.snapshot;
        }
        Err(rejection) => {
            prop_assert!(!accepted, "{:?} rejected with {}", event, rejection);
            let fitting = match (&event, &rejection) {
                (Event::Cancel { .. }, Rejection::InvalidState { event, .. }) => *event == "cancel",
                (Event::Restore, Rejection::InvalidState { event, .. }) => *event == "restore",
                (answer, Rejection::Stale(park)) => answer.park() == *park,
                _ => false,
            };
            prop_assert!(fitting, "{:?} rejected with {:?}", event, rejection);
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_event_sequence_on_every_flow_keeps_the_executor_invariants(
        nodes in proptest::collection::vec(gen_node(), 0..8),
        x in 0i64..5,
        budget in prop_oneof![1u32..12, Just(60)],
        actions in proptest::collection::vec(action(), 0..14),
    ) {
        let flow = build(&nodes);
        let mut snapshot = new_snapshot();
        let start = Event::Start { message: message("m0", json!({"x": x})) };
        drive(&flow, &mut snapshot, start, budget)?;
        for action in &actions {
            // One event after the instance ended shows it is refused; more would show nothing new.
            let ended = snapshot.status.is_terminal();
            let event = event(action, &snapshot);
            drive(&flow, &mut snapshot, event, budget)?;
            if ended {
                break;
            }
        }
    }
}
