//! Sutra's runtime: it turns the pure executor into a durable engine over a [`Store`].
//!
//! Architecture invariant: this crate knows the store only as the `sutra_store::Store` trait and
//! knows no transport; HTTP and brokers live in the server. It is built in floors: each module
//! names (`crate::…`, in code and in docs alike) only modules on floors below its own, so no two
//! modules lean on each other. `tests/floors.rs` holds the floor table, which ARCHITECTURE.md
//! draws; from the ground up:
//!
//! 0. The ground, naming no other module: `config` ([`EngineConfig`]), `error` ([`Error`]),
//!    [`settle`], [`registry`], [`metrics`], [`pulse`] (what this replica's steps did over the
//!    last fifteen minutes, decision 0061), [`history_log`], [`fault`], `test_switches`, and
//!    `waiting`: the polls waiting on this replica, which a step arming a task of their topics
//!    reserves (decision 0039), and the announcement that a task may have become available.
//! 1. `shared` (what every part shares — the store, the configuration and the clock every time
//!    read and wait goes through —, and the owner ids `{replica}/lane-{i}` and
//!    `{replica}/admin`) and [`leadership`]: who runs each singleton role (SPEC §6) — every
//!    process on the embedded store, one replica at a time by lease on a shared one.
//! 2. `handoff`: who takes each task a step arms, locked for it in the step's transaction — the
//!    completing worker that asked ([`tasks::Take`], decision 0038), else a waiting poll. Beside
//!    it the loops that need only the shared state and the roles: `answers` (callers held here
//!    whose instance another replica ended), `history` (the purger), `retirement` (the
//!    retirement gate), [`outbox`] (the outbox worker, and the [`outbox::Sender`] seam the
//!    server's transports implement, SPEC §5.4) and `sampler` (the pulse's sample every ten
//!    seconds).
//! 3. `request`: what a lane is asked to run — a step on an instance, a worker's completion of a
//!    task — and what its caller learns ([`runner::StepOutcome`]).
//! 4. `written`: a step written in its group and not yet committed, and its landing once the
//!    group committed; `step_rows`: what a step's effects and its member's bookkeeping become
//!    in the store's commit (the children a call inserts, the report a child's end sends).
//! 5. [`runner`]: the claim-guarded step (SPEC §5.2), one member of a group transaction.
//! 6. `group`: group commit (decision 0024) — a lane's queued steps as the members of one
//!    transaction, each on its own claim, all answered after its commit.
//! 7. `lane` (execution lanes, each a loop on a dedicated thread, and the routing of each
//!    instance to the lane that owns it, SPEC §6) and `admin` (the administrative executor:
//!    cancel, restore, migrate and poisoning, each a group of one, one at a time under the admin
//!    owner).
//! 8. The parts on top of them, each a unit that never sees the engine: [`intake`] (a message on
//!    a channel → dedup, relay, start or buffer, SPEC §5.1), [`tasks`] (the pull surface:
//!    long-polls, completions, failures and extensions of external tasks, SPEC §5.5), `deploy`
//!    (checking and storing deployments, and the one activation path that flips every lane before
//!    intake routes by a version), `deliveries` (the delivery dispatcher: timers and every other
//!    asked row, with look-again and `recover`, SPEC §5.6, and the dispatch mark, which poisons
//!    the instance of a delivery that keeps dying with its dispatcher), `sweep` (the
//!    stuck-instance sweep, which poisons instances whose durable claims it keeps clearing) and
//!    [`bulk`] (bulk repair), and `scheduler` (a start at each tick of each scheduled flow,
//!    exactly once through the inbox, decision 0056). The dispatcher (`timers`), the sweep
//!    (`instance-sweeper`), `history`'s purger (`history-purger`), the retirement gate
//!    (`retirement-gate`) and the scheduler (`scheduler`) run only while this replica leads
//!    their role.
//! 9. `converge`: deployments made through another replica, loaded and activated here.
//! 10. The top: [`Engine`], the facade that composes the parts and hands each call on.
//!
//! Feature `test-hooks` (off by default) compiles in the crash tests' fault points ([`fault`],
//! `SUTRA_FAULT`) and the lane tests' switches (`test_switches`, `SUTRA_TEST_*`), which break
//! invariants on purpose. Only test builds enable it — `sutra-cli`'s dev-dependencies, forwarded
//! through `sutra-server` — so that no release binary honours them; without it both are empty.
//!
//! [`Store`]: sutra_store::Store

mod admin;
mod answers;
mod arms;
pub mod bulk;
mod config;
mod converge;
mod deliveries;
mod deploy;
mod engine;
mod error;
pub mod fault;
mod group;
mod handoff;
mod history;
pub mod history_log;
pub mod intake;
mod lane;
pub mod leadership;
pub mod metrics;
pub mod outbox;
pub mod pulse;
mod quota;
pub mod registry;
mod request;
mod retirement;
pub mod runner;
mod sampler;
mod scheduler;
pub mod settle;
mod shared;
mod step_rows;
mod sweep;
pub mod tasks;
mod test_switches;
mod waiting;
mod written;

pub use admin::Restored;
pub use config::{EngineConfig, Refusal};
pub use deploy::{DeployError, Deployed};
pub use engine::Engine;
pub use error::Error;
