//! The executor, node kind by node kind and in combination (SPEC §2 node kinds, §7.2 failure).
//!
//! `node_kinds_and_their_combinations_behave_as_specified` is the table: each row is a flow, an
//! input, a script of events aimed at the park of the token at a node, and the instance that
//! must result. The tests after it pin down effects, history and rejections, which a table row
//! would express poorly.

mod support;

use jiff::SignedDuration;
use serde_json::{Value, json};
use support::*;
use sutra_core::model::{After, NodeIndex};
use sutra_core::snapshot::{Failure, ParkId, ParkKind, Snapshot, Status, TokenState};
use sutra_core::step::{Effect, Event, HistoryKind, Rejection, Reply, Step, StepContext};

/// One event of a script, aimed at the park of the token at a node.
enum Do {
    Relay(&'static str, Value),
    Fire(&'static str),
    Complete(&'static str, Value),
    Fail(&'static str, &'static str),
    Exhaust(&'static str),
    Cancel,
    Restore,
}

impl Do {
    fn event(&self, sim: &Sim) -> Event {
        match self {
            Do::Relay(node, data) => Event::Relay {
                park: sim.park(node),
                message: message("m1", data.clone()),
            },
            Do::Fire(node) => Event::TimerFired {
                park: sim.park(node),
            },
            Do::Complete(node, output) => Event::TaskCompleted {
                park: sim.park(node),
                output: output.clone(),
            },
            Do::Fail(node, code) => Event::TaskFailed {
                park: sim.park(node),
                error: task_error(code, "the worker said no"),
            },
            Do::Exhaust(node) => Event::TaskExhausted {
                park: sim.park(node),
                error: task_error("HTTP.502", "bad gateway"),
            },
            Do::Cancel => Event::Cancel { reason: None },
            Do::Restore => Event::Restore,
        }
    }
}

struct Case {
    name: &'static str,
    nodes: Vec<N>,
    script: Vec<Do>,
    status: Status,
    /// The nodes the live tokens end at, in token order.
    at: Vec<&'static str>,
    /// Variables that must have these values (others may exist).
    vars: Value,
    /// The failure code, for a failed instance.
    failure: Option<&'static str>,
    /// The failure detail, when the row cares.
    detail: Option<&'static str>,
    /// The reply of the last step, when it completed the instance.
    reply: Option<Value>,
}

fn case(name: &'static str, nodes: Vec<N>) -> Case {
    Case {
        name,
        nodes,
        script: vec![],
        status: Status::Completed,
        at: vec![],
        vars: json!({}),
        failure: None,
        detail: None,
        reply: Some(Value::Null),
    }
}

impl Case {
    fn script(mut self, script: Vec<Do>) -> Case {
        self.script = script;
        self
    }
    fn suspended_at(mut self, at: Vec<&'static str>) -> Case {
        self.status = Status::Suspended;
        self.at = at;
        self.reply = None;
        self
    }
    fn failed(mut self, code: &'static str, at: &'static str) -> Case {
        self.status = Status::Failed;
        self.failure = Some(code);
        self.at = vec![at];
        self
    }
    fn detail(mut self, detail: &'static str) -> Case {
        self.detail = Some(detail);
        self
    }
    fn vars(mut self, vars: Value) -> Case {
        self.vars = vars;
        self
    }
    fn reply(mut self, reply: Value) -> Case {
        self.reply = Some(reply);
        self
    }
    fn cancelled(mut self) -> Case {
        self.status = Status::Cancelled;
        self
    }
}

/// A task on topic `topic` with an empty input.
fn t(id: &str) -> N {
    task(id, "topic", json!({}))
}

/// An `end` replying `reply`.
fn end_with(id: &str, reply: Value) -> N {
    end(id, Some(reply))
}

fn table() -> Vec<Case> {
    [
        set_and_end(),
        tasks(),
        receives_and_waits(),
        choices(),
        parallels(),
        failures_and_admin(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn set_and_end() -> Vec<Case> {
    let templates = [
        ("a", json!(1)),
        ("b", json!("= vars.a + vars.input.x")),
        (
            "c",
            json!({"b": "= vars.b", "lit": "==not an expression", "n": [1, "= vars.a"]}),
        ),
    ];
    let scope = [
        (
            "who",
            json!("= instance.id + '/' + instance.flow + '/' + instance.tenant"),
        ),
        ("version", json!("= instance.version")),
        ("by", json!("= msg.id")),
        ("at", json!("= now")),
    ];
    vec![
        case("an empty flow completes at once", vec![]),
        case(
            "set renders each template with the variables set before it",
            vec![set("s", &templates)],
        )
        .vars(json!({"a": 1, "b": 6, "c": {"b": 6, "lit": "=not an expression", "n": [1, 1]}})),
        case(
            "expressions see instance, msg and now",
            vec![set("s", &scope)],
        )
        .vars(json!({
            "who": "i1/f/default", "version": 1, "by": "m0", "at": "2026-01-01T00:00:00+00:00"
        })),
        case(
            "end replies with its rendered template",
            vec![end_with("e", json!({"got": "= vars.input.x"}))],
        )
        .reply(json!({"got": 5})),
        case(
            "a failing set assigns none of its variables",
            vec![set(
                "s",
                &[("a", json!(1)), ("b", json!("= vars.missing.x"))],
            )],
        )
        .failed("SUTRA.RUNTIME.EXPRESSION.ERROR", "s")
        .vars(json!({"a": null, "b": null})),
    ]
}

fn tasks() -> Vec<Case> {
    let guarded = || {
        vec![
            t("t").on_error("h"),
            end("e", None),
            end_with("h", json!("= vars.error")),
        ]
    };
    vec![
        case("a task parks its token", vec![t("t")]).suspended_at(vec!["t"]),
        case(
            "a completed task's output lands in its output variable",
            vec![t("t").output("r"), end_with("e", json!("= vars.r.ok"))],
        )
        .script(vec![Do::Complete("t", json!({"ok": true}))])
        .vars(json!({"r": {"ok": true}}))
        .reply(json!(true)),
        case(
            "a business error goes to on-error with vars.error",
            guarded(),
        )
        .script(vec![Do::Fail("t", "BANK.DECLINED")])
        .reply(json!({"code": "BANK.DECLINED", "message": "the worker said no"})),
        case(
            "a business error without on-error fails with the worker's code",
            vec![t("t")],
        )
        .script(vec![Do::Fail("t", "BANK.DECLINED")])
        .failed("BANK.DECLINED", "t"),
        case(
            "exhausted retries go to on-error with the exhausted code",
            guarded(),
        )
        .script(vec![Do::Exhaust("t")])
        .reply(json!({"code": "SUTRA.TASK.RETRIES.EXHAUSTED", "message": "bad gateway"})),
        case(
            "exhausted retries without on-error fail the instance",
            vec![t("t")],
        )
        .script(vec![Do::Exhaust("t")])
        .failed("SUTRA.TASK.RETRIES.EXHAUSTED", "t"),
        case(
            "msg is absent in a step a task triggered",
            vec![t("t"), set("s", &[("by", json!("= msg.id"))])],
        )
        .script(vec![Do::Complete("t", json!(null))])
        .failed("SUTRA.RUNTIME.EXPRESSION.ERROR", "s"),
    ]
}

fn receives_and_waits() -> Vec<Case> {
    let r = || receive("r", "replies", "vars.input.k");
    vec![
        case(
            "a relayed message lands in the output variable and is msg for the rest of the step",
            vec![r().output("reply"), set("s", &[("by", json!("= msg.id"))])],
        )
        .script(vec![Do::Relay("r", json!({"approved": true}))])
        .vars(json!({"reply": {"approved": true}, "by": "m1"})),
        case(
            "a receive timeout goes to on-timeout",
            vec![
                r().timeout(60, Some("late")),
                end("e", None),
                end_with("late", json!("late")),
            ],
        )
        .script(vec![Do::Fire("r")])
        .reply(json!("late")),
        case(
            "a receive timeout without on-timeout goes to on-error",
            vec![
                r().timeout(60, None).on_error("h"),
                end("e", None),
                end_with("h", json!("= vars.error.code")),
            ],
        )
        .script(vec![Do::Fire("r")])
        .reply(json!("SUTRA.RUNTIME.RECEIVE.TIMEOUT")),
        case(
            "a receive timeout without handlers fails the instance",
            vec![r().timeout(60, None)],
        )
        .script(vec![Do::Fire("r")])
        .failed("SUTRA.RUNTIME.RECEIVE.TIMEOUT", "r"),
        case(
            "a wait continues when its timer fires",
            vec![wait_for("w", 30), end_with("e", json!("done"))],
        )
        .script(vec![Do::Fire("w")])
        .reply(json!("done")),
        case(
            "a wait until a timestamp continues when its timer fires",
            vec![
                wait_until("w", "now + duration('1h')"),
                end_with("e", json!("done")),
            ],
        )
        .script(vec![Do::Fire("w")])
        .reply(json!("done")),
        case(
            "a wait until a non-time fails with an expression error",
            vec![wait_until("w", "vars.input.k")],
        )
        .failed("SUTRA.RUNTIME.EXPRESSION.ERROR", "w"),
        case(
            "a loop that parks on each turn stays within the budget",
            vec![wait_for("loop", 1).next("loop")],
        )
        .script(vec![Do::Fire("loop"), Do::Fire("loop")])
        .suspended_at(vec!["loop"]),
    ]
}

fn choices() -> Vec<Case> {
    let ends = || {
        vec![
            end_with("big", json!("big")),
            end_with("small", json!("small")),
        ]
    };
    let with = |choice: N| [vec![choice], ends()].concat();
    vec![
        case(
            "the first true guard of a choice wins",
            with(choice(
                "c",
                &[
                    ("vars.input.x > 10", "big"),
                    ("vars.input.x > 1", "small"),
                    ("true", "big"),
                ],
                None,
            )),
        )
        .reply(json!("small")),
        case(
            "a choice with no true guard takes otherwise",
            with(choice("c", &[("vars.input.x > 10", "big")], Some("small"))),
        )
        .reply(json!("small")),
        case(
            "a choice with no true guard and no otherwise fails",
            with(choice("c", &[("vars.input.x > 10", "big")], None)),
        )
        .failed("SUTRA.RUNTIME.CHOICE.NO_MATCH", "c"),
        case(
            "a non-boolean guard is an expression error",
            with(choice("c", &[("vars.input.x", "big")], None)),
        )
        .failed("SUTRA.RUNTIME.EXPRESSION.ERROR", "c"),
        case(
            "restore evaluates the failed node anew and may fail again",
            with(choice("c", &[("vars.input.x > 10", "big")], None)),
        )
        .script(vec![Do::Restore])
        .failed("SUTRA.RUNTIME.CHOICE.NO_MATCH", "c"),
    ]
}

fn parallels() -> Vec<Case> {
    let two_tasks = || {
        vec![
            parallel(
                "p",
                vec![vec![t("a").output("a")], vec![t("b").output("b")]],
            ),
            end_with("e", json!(["= vars.a", "= vars.b"])),
        ]
    };
    let nested = vec![
        parallel(
            "outer",
            vec![
                vec![
                    parallel("inner", vec![vec![t("a")], vec![t("b")]]),
                    set("after-inner", &[("inner", json!(true))]),
                ],
                vec![wait_for("w", 5)],
            ],
        ),
        end_with("e", json!("= vars.inner")),
    ];
    let never_park = vec![
        parallel(
            "p",
            vec![
                vec![set("a", &[("a", json!(1))])],
                vec![],
                vec![set("b", &[("b", json!(2))])],
            ],
        ),
        end_with("e", json!("= vars.a + vars.b")),
    ];
    vec![
        case(
            "a parallel joins when its branches' tasks complete in order",
            two_tasks(),
        )
        .script(vec![
            Do::Complete("a", json!(1)),
            Do::Complete("b", json!(2)),
        ])
        .reply(json!([1, 2])),
        case(
            "a parallel joins when its branches' tasks complete in reverse order",
            two_tasks(),
        )
        .script(vec![
            Do::Complete("b", json!(2)),
            Do::Complete("a", json!(1)),
        ])
        .reply(json!([1, 2])),
        case(
            "a parallel waits while a branch is still parked",
            two_tasks(),
        )
        .script(vec![Do::Complete("b", json!(2))])
        .suspended_at(vec!["p", "a"]),
        case(
            "a parallel of empty branches continues at once",
            vec![
                parallel("p", vec![vec![], vec![]]),
                end_with("e", json!("through")),
            ],
        )
        .reply(json!("through")),
        case("branches that never park join within the step", never_park).reply(json!(3)),
        case("nested parallels join inside out", nested)
            .script(vec![
                Do::Complete("a", json!(1)),
                Do::Fire("w"),
                Do::Complete("b", json!(2)),
            ])
            .reply(json!(true)),
        case(
            "a branch running off the end of the flow's last node completes the instance",
            vec![parallel("p", vec![vec![t("a")]])],
        )
        .script(vec![Do::Complete("a", json!(1))]),
        case(
            "end inside a branch completes the instance and cancels its siblings",
            vec![parallel(
                "p",
                vec![vec![t("a")], vec![t("b"), end_with("stop", json!("stop"))]],
            )],
        )
        .script(vec![Do::Complete("b", json!(1))])
        .reply(json!("stop")),
    ]
}

fn failures_and_admin() -> Vec<Case> {
    let counting = vec![
        set("s", &[("x", json!(0))]),
        set("loop", &[("x", json!("= vars.x + 1"))]).next("loop"),
    ];
    vec![
        case(
            "fail fails the instance with its code and rendered detail",
            vec![fail(
                "f",
                "ORDER.REJECTED",
                Some(json!("= 'order ' + vars.input.k")),
            )],
        )
        .failed("ORDER.REJECTED", "f")
        .detail("order t1"),
        case("a loop that never parks exceeds the budget", counting)
            .failed("SUTRA.RUNTIME.STEP.BUDGET_EXCEEDED", "loop"),
        case(
            "a value holding NUL, which no store can hold, fails the instance",
            vec![set("n", &[("x", json!(r"= 'a\u0000b'"))])],
        )
        .failed("SUTRA.RUNTIME.EXPRESSION.ERROR", "n"),
        case("cancel ends a suspended instance", vec![t("t")])
            .script(vec![Do::Cancel])
            .cancelled(),
        case(
            "cancel ends a failed instance",
            vec![fail("f", "X.Y", None)],
        )
        .script(vec![Do::Cancel])
        .cancelled(),
        case(
            "restore runs the failed task again",
            vec![t("t").output("r"), end_with("e", json!("= vars.r"))],
        )
        .script(vec![
            Do::Exhaust("t"),
            Do::Restore,
            Do::Complete("t", json!("second time")),
        ])
        .reply(json!("second time")),
    ]
}

#[test]
fn node_kinds_and_their_combinations_behave_as_specified() {
    for case in table() {
        let name = case.name;
        let mut sim = Sim::new(case.nodes);
        let mut last = sim.start(json!({"k": "t1", "x": 5}));
        for action in &case.script {
            last = sim.ok(action.event(&sim));
        }
        assert_eq!(sim.status(), case.status, "{name}: status");
        assert_eq!(sim.at(), case.at, "{name}: tokens");
        let failure = sim.snapshot.failure.clone();
        let code = failure.as_ref().map(|f| f.code.as_str());
        assert_eq!(code, case.failure, "{name}: failure");
        if let Some(detail) = case.detail {
            assert_eq!(failure.as_ref().unwrap().detail, detail, "{name}: detail");
        }
        let reply = match case.status {
            Status::Failed => failure.map(|f| Reply::Failed {
                code: f.code,
                detail: f.detail,
            }),
            Status::Cancelled => Some(Reply::Cancelled),
            _ => case.reply.map(Reply::Completed),
        };
        assert_eq!(last.reply, reply, "{name}: reply");
        for (var, value) in case.vars.as_object().unwrap() {
            assert_eq!(&sim.var(var), value, "{name}: vars.{var}");
        }
    }
}

fn arms(step: &Step) -> Vec<ParkId> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Arm { park, .. } => Some(park.id),
            _ => None,
        })
        .collect()
}

fn disarms(step: &Step) -> Vec<ParkId> {
    step.effects
        .iter()
        .filter_map(|e| match e {
            Effect::Disarm(disarm) => Some(disarm.park),
            _ => None,
        })
        .collect()
}

fn kinds(step: &Step) -> Vec<HistoryKind> {
    step.history.iter().map(|h| h.kind).collect()
}

#[test]
fn parks_carry_what_the_store_needs_to_arm_them() {
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![task("t", "debit", json!({"amount": "= vars.input.x"}))],
            vec![receive("r", "replies", "vars.input.x").timeout(60, None)],
            vec![wait_for("w", 30)],
        ],
    )]);
    let step = sim.start(json!({"x": 7}));
    let parks: Vec<ParkKind> = sim.snapshot.parks().map(|p| p.kind.clone()).collect();
    let due = now() + SignedDuration::from_secs(60);
    assert_eq!(
        parks,
        vec![
            ParkKind::Task {
                topic: "debit".into(),
                input: json!({"amount": 7}),
                retries: 3,
                backoff: SignedDuration::from_secs(5),
                lock: SignedDuration::from_secs(300),
                due: None,
            },
            ParkKind::Receive {
                channel: "replies".into(),
                key: "7".into(),
                due: Some(due)
            },
            ParkKind::Wait {
                due: now() + SignedDuration::from_secs(30)
            },
        ]
    );
    assert_eq!(
        arms(&step),
        sim.snapshot.parks().map(|p| p.id).collect::<Vec<_>>()
    );
    assert_eq!(
        kinds(&step),
        [HistoryKind::Started, HistoryKind::Forked]
            .into_iter()
            .chain([HistoryKind::Parked; 3])
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_wait_until_a_past_time_still_parks_and_is_due_at_that_time() {
    let mut sim = Sim::new(vec![wait_until("w", "'2025-06-01T12:00:00+02:00'")]);
    sim.start(json!({}));
    let due = sim.snapshot.parks().next().unwrap().kind.due();
    assert_eq!(due, Some("2025-06-01T10:00:00Z".parse().unwrap()));
    assert_eq!(sim.status(), Status::Suspended);
}

#[test]
fn an_emit_is_keyed_by_instance_audit_seq_and_node() {
    let mut sim = Sim::new(vec![
        set("s", &[("n", json!(1))]),
        emit("notify", "ledger", json!({"k": "= vars.input.k"})).key("vars.input.k"),
        task("t", "topic", json!({})),
        emit("again", "ledger", json!("plain")),
    ]);
    let step = sim.start(json!({"k": "t1"}));
    let emitted = step
        .history
        .iter()
        .find(|h| h.kind == HistoryKind::Emitted)
        .unwrap();
    assert_eq!(emitted.seq, 3, "started, variables_set, then emitted");
    assert_eq!(
        step.effects[0],
        Effect::Emit {
            channel: "ledger".into(),
            data: json!({"k": "t1"}),
            key: Some("t1".into()),
            idempotency_key: "i1:3:notify".into(),
        }
    );
    let step = sim.ok(Event::TaskCompleted {
        park: sim.park("t"),
        output: json!(null),
    });
    let Effect::Emit {
        idempotency_key,
        key,
        ..
    } = &step.effects[0]
    else {
        panic!("{:?}", step.effects)
    };
    assert_eq!((idempotency_key.as_str(), key), ("i1:6:again", &None));
}

#[test]
fn end_in_a_branch_disarms_older_parks_and_leaves_no_trace_of_parks_made_in_its_step() {
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![task("old", "t", json!({}))],
            vec![task("go", "t", json!({})), end("stop", None)],
            vec![task("trigger", "t", json!({})), wait_for("new", 10)],
        ],
    )]);
    sim.start(json!({}));
    let (old, go, trigger) = (sim.park("old"), sim.park("go"), sim.park("trigger"));
    // `trigger` completing parks its token on a fresh wait: armed in this step.
    let step = sim.ok(Event::TaskCompleted {
        park: trigger,
        output: json!(null),
    });
    let new = sim.park("new");
    assert_eq!(arms(&step), vec![new]);
    // Two deliveries later, in one step: `new` existed before it and so is disarmed.
    let step = sim.ok(Event::TaskCompleted {
        park: go,
        output: json!(null),
    });
    assert_eq!(
        disarms(&step),
        vec![old, new],
        "the answered park `go` is not disarmed"
    );
    assert!(arms(&step).is_empty());
    assert_eq!(step.reply, Some(Reply::Completed(json!(null))));
    assert!(sim.snapshot.tokens.is_empty());

    // Parks made and ended in the same step produce no effect at all.
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![task("a", "t", json!({}))],
            vec![receive("r", "c", "'k'")],
            vec![end("stop", None)],
        ],
    )]);
    let step = sim.start(json!({}));
    assert!(step.effects.is_empty(), "{:?}", step.effects);
    assert_eq!(sim.status(), Status::Completed);
}

#[test]
fn a_failure_disarms_older_parks_drops_new_arms_keeps_emits_and_keeps_parks_for_restore() {
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![task("old", "t", json!({}))],
            vec![
                task("trigger", "t", json!({})),
                emit("e", "ledger", json!(1)),
                task("new", "t", json!({})),
                set("noop", &[]),
            ],
            vec![
                task("go", "t", json!({})),
                fail("boom", "X.BOOM", Some(json!({"why": 1}))),
            ],
        ],
    )]);
    sim.start(json!({}));
    let old = sim.park("old");
    sim.ok(Event::TaskCompleted {
        park: sim.park("trigger"),
        output: json!(null),
    });
    let new = sim.park("new");
    let step = sim.ok(Event::TaskCompleted {
        park: sim.park("go"),
        output: json!(null),
    });
    assert_eq!(disarms(&step), vec![old, new]);
    assert_eq!(
        step.reply,
        Some(Reply::Failed {
            code: "X.BOOM".into(),
            detail: r#"{"why":1}"#.into()
        })
    );
    let failure = sim.snapshot.failure.clone().unwrap();
    assert_eq!(
        (failure.code.as_str(), failure.node.as_deref()),
        ("X.BOOM", Some("boom"))
    );
    let failed = sim.snapshot.token(failure.token.unwrap()).unwrap();
    assert_eq!(
        (failed.node.as_str(), &failed.state),
        ("boom", &TokenState::Ready)
    );
    assert_eq!(
        sim.snapshot.parks().map(|p| p.id).collect::<Vec<_>>(),
        vec![old, new]
    );

    // Within one step: an emit before the failure stands, a park armed before it does not.
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![emit("e", "ledger", json!(1)), task("t", "t", json!({}))],
            vec![fail("boom", "X.BOOM", None)],
        ],
    )]);
    let step = sim.start(json!({}));
    assert!(
        matches!(step.effects.as_slice(), [Effect::Emit { .. }]),
        "{:?}",
        step.effects
    );
    assert_eq!(
        sim.snapshot.failure.unwrap().detail,
        "the flow reached fail node `boom`"
    );
}

#[test]
fn restore_rearms_under_fresh_park_ids_so_deliveries_for_torn_down_parks_are_stale() {
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![receive("r", "c", "'k'").output("m")],
            vec![task("t", "t", json!({}))],
        ],
    )]);
    sim.start(json!({}));
    let (r, t) = (sim.park("r"), sim.park("t"));
    sim.ok(Event::TaskExhausted {
        park: t,
        error: task_error("E", "gone"),
    });
    let relay = |park| Event::Relay {
        park,
        message: message("m1", json!("hi")),
    };
    assert_eq!(
        sim.apply(relay(r)),
        Err(Rejection::Stale(Some(r))),
        "a failed instance holds no live park"
    );

    let step = sim.ok(Event::Restore);
    let (r2, t2) = (sim.park("r"), sim.park("t"));
    assert!(
        r2 != r && r2 != t && t2 != t && t2 != r,
        "fresh ids: {r2:?} {t2:?}"
    );
    assert_eq!(
        arms(&step),
        vec![r2, t2],
        "the parked receive re-armed, the failed task re-run"
    );
    assert!(disarms(&step).is_empty());
    assert_eq!(sim.status(), Status::Suspended);
    assert_eq!(sim.snapshot.failure, None);
    assert_eq!(
        kinds(&step),
        [
            HistoryKind::Restored,
            HistoryKind::Parked,
            HistoryKind::Parked
        ]
    );

    assert_eq!(sim.apply(relay(r)), Err(Rejection::Stale(Some(r))));
    sim.ok(relay(r2));
    assert_eq!(sim.var("m"), json!("hi"));
}

#[test]
fn restore_runs_a_failed_parked_token_s_node_again_instead_of_re_arming_its_park() {
    // The engine fails an instance on a parked token when the store refuses the park (a taken
    // correlation alias); the repair changes the data the park was made from.
    let mut sim = Sim::new(vec![receive("r", "c", "vars.input.k")]);
    sim.start(json!({"k": "old"}));
    let mut failed = sim.snapshot.clone();
    failed.status = Status::Failed;
    failed.failure = Some(Failure {
        code: "SUTRA.RUNTIME.CORRELATION.ALIAS_TAKEN".into(),
        detail: "taken".into(),
        token: Some(failed.tokens[0].id),
        node: Some("r".into()),
    });
    failed.vars.insert("input".into(), json!({"k": "new"}));
    sim.snapshot = failed;
    let step = sim.ok(Event::Restore);
    let [Effect::Arm { park, .. }] = step.effects.as_slice() else {
        panic!("{:?}", step.effects)
    };
    assert!(
        matches!(&park.kind, ParkKind::Receive { key, .. } if key == "new"),
        "{park:?}"
    );
}

#[test]
fn deliveries_for_parks_the_instance_does_not_hold_as_that_kind_are_stale() {
    let mut sim = Sim::new(vec![
        parallel(
            "p",
            vec![
                vec![task("t", "topic", json!({}))],
                vec![receive("r", "c", "'k'")],
            ],
        ),
        wait_for("w", 1),
    ]);
    sim.start(json!({}));
    let (t, r) = (sim.park("t"), sim.park("r"));
    let before = sim.snapshot.clone();
    let relay = |park| Event::Relay {
        park,
        message: message("m", json!(1)),
    };
    let complete = |park| Event::TaskCompleted {
        park,
        output: json!(1),
    };
    for (wrong, park) in [
        (Event::TimerFired { park: t }, t),
        (relay(t), t),
        (Event::TimerFired { park: r }, r),
        (complete(r), r),
        (complete(ParkId(99)), ParkId(99)),
    ] {
        assert_eq!(
            sim.apply(wrong),
            Err(Rejection::Stale(Some(park))),
            "a timer answers only a park with a due time"
        );
    }
    assert_eq!(sim.snapshot, before, "a rejection changes nothing");
    sim.ok(complete(t));
    sim.ok(relay(r));
    assert_eq!(
        sim.apply(complete(t)),
        Err(Rejection::Stale(Some(t))),
        "answered twice"
    );
    sim.ok(Event::TimerFired {
        park: sim.park("w"),
    });
    assert_eq!(sim.status(), Status::Completed);
    assert_eq!(
        sim.apply(Event::TimerFired { park: t }),
        Err(Rejection::Stale(Some(t)))
    );
}

#[test]
fn a_position_its_flow_lacks_fails_the_instance_instead_of_panicking() {
    let code = |sim: &Sim| sim.snapshot.failure.clone().map(|f| f.code);
    let unknown = Some("SUTRA.RUNTIME.NODE.UNKNOWN".to_owned());

    // A snapshot migrated onto a version without its token's node, and no map.
    let mut sim = Sim::new(vec![t("t")]);
    sim.start(json!({}));
    let park = sim.park("t");
    sim.flow = flow(vec![t("renamed")]);
    sim.ok(Event::TaskCompleted {
        park,
        output: json!(1),
    });
    assert_eq!(code(&sim), unknown);

    // A jump out of the arena.
    let mut sim = Sim::new(vec![set("s", &[])]);
    sim.flow.nodes[0].after = After::Node(NodeIndex(9));
    sim.start(json!({}));
    assert_eq!(code(&sim), unknown);
    assert_eq!(sim.at(), ["s"]);
}

#[test]
fn admin_events_apply_only_in_the_statuses_that_allow_them() {
    let invalid = |event, status| Err(Rejection::InvalidState { event, status });
    let mut sim = Sim::new(vec![task("t", "topic", json!({}))]);
    assert_eq!(
        sim.apply(Event::Cancel { reason: None }),
        invalid("cancel", "created")
    );
    assert_eq!(sim.apply(Event::Restore), invalid("restore", "created"));
    sim.start(json!({}));
    assert_eq!(
        sim.apply(Event::Start {
            message: message("m", json!({}))
        }),
        invalid("start", "suspended")
    );
    assert_eq!(sim.apply(Event::Restore), invalid("restore", "suspended"));
    let t = sim.park("t");
    let step = sim.ok(Event::Cancel {
        reason: Some("operator".into()),
    });
    assert_eq!(disarms(&step), vec![t]);
    assert_eq!(step.history[0].detail, json!({"reason": "operator"}));
    assert!(sim.snapshot.tokens.is_empty());
    assert_eq!(
        sim.apply(Event::Cancel { reason: None }),
        invalid("cancel", "cancelled")
    );
    assert_eq!(sim.apply(Event::Restore), invalid("restore", "cancelled"));
    assert_eq!(
        sim.apply(Event::TaskCompleted {
            park: t,
            output: json!(1)
        }),
        Err(Rejection::Stale(Some(t)))
    );

    // A failed instance's parks were disarmed when it failed: cancelling it disarms nothing.
    let mut sim = Sim::new(vec![parallel(
        "p",
        vec![
            vec![task("t", "topic", json!({}))],
            vec![task("u", "topic", json!({}))],
        ],
    )]);
    sim.start(json!({}));
    sim.ok(Event::TaskExhausted {
        park: sim.park("u"),
        error: task_error("E", "gone"),
    });
    let step = sim.ok(Event::Cancel { reason: None });
    assert!(step.effects.is_empty());
    assert_eq!(sim.snapshot.failure, None);
}

#[test]
fn the_audit_sequence_continues_across_steps_without_gaps() {
    let mut sim = Sim::new(vec![
        set("s", &[("n", json!(0))]),
        parallel(
            "p",
            vec![
                vec![task("a", "t", json!({}))],
                vec![receive("r", "c", "'k'").timeout(5, None)],
            ],
        ),
        choice("c", &[("vars.n < 2", "again")], Some("done")),
        set("again", &[("n", json!("= vars.n + 1"))]).next("p"),
        end("done", None),
    ]);
    let mut steps = vec![sim.start(json!({}))];
    for _ in 0..3 {
        steps.push(sim.ok(Event::TaskCompleted {
            park: sim.park("a"),
            output: json!(1),
        }));
        steps.push(sim.ok(Event::TimerFired {
            park: sim.park("r"),
        }));
        if sim.status() == Status::Failed {
            steps.push(sim.ok(Event::Restore));
            steps.push(sim.ok(Event::Relay {
                park: sim.park("r"),
                message: message("m", json!(1)),
            }));
        }
    }
    let seqs: Vec<u64> = steps
        .iter()
        .flat_map(|s| s.history.iter().map(|h| h.seq))
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(sim.snapshot.audit_seq, seqs.len() as u64);
    assert!(steps.iter().flat_map(|s| &s.history).all(|h| h.at == now()));
}

#[test]
fn the_same_inputs_give_the_same_step() {
    let flow = flow(vec![
        set(
            "s",
            &[("at", json!("= now")), ("id", json!("= instance.id"))],
        ),
        parallel(
            "p",
            vec![
                vec![task("a", "t", json!({"x": "= vars.at"}))],
                vec![emit("e", "c", json!("= vars.id"))],
            ],
        ),
        end("done", Some(json!("= vars"))),
    ]);
    let start = || Event::Start {
        message: message("m0", json!({"k": 1})),
    };
    let apply = |snapshot: &Snapshot, event| sutra_core::exec::apply(&flow, snapshot, event, ctx());
    let fresh = new_snapshot();
    let first = apply(&fresh, start()).unwrap();
    assert_eq!(first, apply(&fresh, start()).unwrap());
    let park = first.snapshot.parks().next().unwrap().id;
    let done = || Event::TaskCompleted {
        park,
        output: json!([1, 2]),
    };
    assert_eq!(
        apply(&first.snapshot, done()),
        apply(&first.snapshot, done())
    );
    let later = StepContext {
        now: now() + SignedDuration::from_secs(1),
        ..ctx()
    };
    let moved = sutra_core::exec::apply(&flow, &fresh, start(), later).unwrap();
    assert_ne!(
        first.snapshot.vars, moved.snapshot.vars,
        "`now` is the context's time, and only it"
    );
}

#[test]
fn a_failure_stamped_from_outside_disarms_every_park_and_restores_them_all() {
    let mut sim = Sim::new(vec![parallel(
        "fork",
        vec![
            vec![wait_for("w1", 3600)],
            vec![task("t1", "topic", json!({}))],
        ],
    )]);
    sim.start(json!({}));
    let parked = sim.snapshot.clone();
    let step =
        sutra_core::exec::fail(&parked, "SUTRA.RUNTIME.STEP.POISONED", "died", sim.ctx).unwrap();
    assert_eq!(step.snapshot.status, Status::Failed);
    assert_eq!(
        step.effects.len(),
        2,
        "both parks are disarmed: {:?}",
        step.effects
    );
    assert_eq!(step.history.len(), 1);
    assert_eq!(step.history[0].seq, parked.audit_seq + 1);
    assert!(
        sutra_core::exec::fail(&step.snapshot, "X", "again", sim.ctx).is_err(),
        "a failed instance is not failed twice"
    );
    sim.snapshot = step.snapshot;
    let restored = sim.ok(Event::Restore);
    assert_eq!(restored.snapshot.status, Status::Suspended);
    assert_eq!(restored.snapshot.parks().count(), 2);
}
