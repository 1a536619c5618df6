//! Fault injection for crash tests: `SUTRA_FAULT=point[@n|@*][:panic|:stop|:lose],...` kills
//! this process with SIGKILL the n-th time (default: first) execution reaches `point`, or every
//! time with `@*` — or, with `:panic`,
//! panics there instead, to prove that a panicking step releases its claim; or, with `:stop`,
//! stops itself with SIGSTOP there, holding whatever it holds (a claim's row lock, an open
//! transaction) until the test sends SIGCONT; or, with `:lose`, at a point [`lost`] marks,
//! reports the operation just done as failed although it landed: a `COMMIT` whose answer the
//! connection lost.
//!
//! The crash tests need deaths at exact places — after a claim and before its commit, after a
//! commit and before the reply, inside a timer fire, between an outbox send and its mark —
//! which a kill from outside cannot hit reliably. The process announces the point on stderr
//! (`sutra: fault point <name> reached`) and then sends itself SIGKILL: no destructor, no flush,
//! no release runs, exactly as if the machine had lost power for this process. Without the
//! variable, a point costs one atomic load.
//!
//! `after-compensated` is reached once a step that completed a compensation handler (and armed
//! the next one) has committed, before anyone hears of it.
//!
//! `child-ended` is reached as the dispatcher takes a called instance's report to its caller:
//! after the child's final commit, before the caller's step that takes the report.
//!
//! `tick-started` is reached once a schedule's tick has started its instance (the start
//! committed), before the schedule's row records the tick as fired.
//!
//! `apply-task-outcome` and `apply-relay` are reached only by a step about to apply a task's
//! outcome (completed, failed, exhausted) or a relayed message: `apply-task-outcome@*:panic` is a
//! step that always fails on one kind of delivery, for the delivery ceiling's tests
//! (docs/decisions/0047).
//!
//! The points exist only with the `test-hooks` feature, which only test builds enable: without
//! it [`point`] is empty and `SUTRA_FAULT` is not even in the binary, so no release build can be
//! made to die on purpose.

use sutra_core::step::Event;

/// The points a crash test can choose.
pub const POINTS: &[&str] = &[
    "after-claim",
    "before-commit",
    "before-group-commit",
    "after-group-commit",
    "after-commit",
    "timer-fire",
    "child-ended",
    "after-compensated",
    "after-start-commit",
    "after-send",
    "after-task-complete",
    "before-broker-ack",
    "apply-task-outcome",
    "apply-relay",
    "tick-started",
];

/// The fault points of a step about to apply a task's outcome or a relayed message: the crash
/// tests of the delivery ceiling (docs/decisions/0047) fail those steps alone.
#[inline]
pub fn applying(event: &Event) {
    match event {
        Event::TaskCompleted { .. } | Event::TaskFailed { .. } | Event::TaskExhausted { .. } => {
            point("apply-task-outcome")
        }
        Event::Relay { .. } => point("apply-relay"),
        _ => {}
    }
}

/// Marks a fault point; dies (or panics) here if the plan says so.
#[inline]
pub fn point(name: &'static str) {
    debug_assert!(POINTS.contains(&name), "undeclared fault point {name}");
    #[cfg(feature = "test-hooks")]
    armed::reach(name);
}

/// Marks a fault point after an operation whose outcome the caller acts on: `true` when the
/// plan says to report the operation lost (`:lose`); dies, panics or stops as [`point`] does.
#[inline]
pub fn lost(name: &'static str) -> bool {
    debug_assert!(POINTS.contains(&name), "undeclared fault point {name}");
    #[cfg(feature = "test-hooks")]
    return armed::reach(name);
    #[cfg(not(feature = "test-hooks"))]
    false
}

#[cfg(feature = "test-hooks")]
mod armed {
    use std::collections::HashMap;
    use std::io::Write;
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU32, Ordering};

    struct Plan {
        points: HashMap<String, Fault>,
    }

    struct Fault {
        hits: AtomicU32,
        /// The hit that fires; `None` (`@*`): every hit.
        nth: Option<u32>,
        action: Action,
    }

    enum Action {
        Kill,
        Panic,
        Stop,
        Lose,
    }

    fn plan() -> Option<&'static Plan> {
        static PLAN: OnceLock<Option<Plan>> = OnceLock::new();
        PLAN.get_or_init(|| {
            let spec = std::env::var("SUTRA_FAULT")
                .ok()
                .filter(|s| !s.is_empty())?;
            let points = spec
                .split(',')
                .map(|entry| {
                    let (entry, action) = if let Some(entry) = entry.strip_suffix(":panic") {
                        (entry, Action::Panic)
                    } else if let Some(entry) = entry.strip_suffix(":stop") {
                        (entry, Action::Stop)
                    } else if let Some(entry) = entry.strip_suffix(":lose") {
                        (entry, Action::Lose)
                    } else {
                        (entry, Action::Kill)
                    };
                    let (name, nth) = entry.split_once('@').unwrap_or((entry, "1"));
                    let fault = Fault {
                        hits: AtomicU32::new(0),
                        nth: match nth.trim() {
                            "*" => None,
                            nth => Some(nth.parse().unwrap_or(1)),
                        },
                        action,
                    };
                    (name.trim().to_owned(), fault)
                })
                .collect();
            Some(Plan { points })
        })
        .as_ref()
    }

    /// Dies (or panics, or stops) at `name` if the plan says so; `true` if it says to report
    /// the operation before the point lost.
    pub(super) fn reach(name: &str) -> bool {
        let Some(plan) = plan() else { return false };
        let Some(fault) = plan.points.get(name) else {
            return false;
        };
        let hit = fault.hits.fetch_add(1, Ordering::SeqCst) + 1;
        if fault.nth.is_some_and(|nth| nth != hit) {
            return false;
        }
        let signal = match fault.action {
            Action::Panic => panic!("sutra: fault point {name} panicked on purpose"),
            Action::Lose => {
                let _ = writeln!(std::io::stderr(), "sutra: fault point {name} lost");
                return true;
            }
            Action::Stop => "-STOP",
            Action::Kill => "-KILL",
        };
        let _ = writeln!(std::io::stderr(), "sutra: fault point {name} reached");
        let _ = std::process::Command::new("kill")
            .args([signal, &std::process::id().to_string()])
            .status();
        if matches!(fault.action, Action::Kill) {
            // SIGKILL is asynchronous only in theory; never continue past a fatal point.
            std::process::abort();
        }
        false
    }
}
