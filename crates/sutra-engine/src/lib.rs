//! Sutra's runtime: it turns the pure executor into a durable engine over a [`Store`].
//!
//! Architecture invariant: this crate knows the store only as the `sutra_store::Store` trait and
//! knows no transport; HTTP and brokers live in the server. It is built in floors, each importing
//! only the floors below it:
//!
//! - The ground: `config` ([`EngineConfig`]), `error` ([`Error`]), `shared` (what every part
//!   shares — the store, the configuration and the clock every time read and wait goes
//!   through —, and the owner ids `{replica}/lane-{i}` and `{replica}/admin`), with the small
//!   pieces they stand on: [`settle`], [`registry`], [`metrics`], [`fault`] and `test_switches`.
//! - The parts, each a unit that knows the shared state and what stands below it, never the
//!   engine:
//!   - `lane`: execution lanes, each a loop on a dedicated thread, and the routing of each
//!     instance to the lane that owns it (SPEC §6).
//!   - [`runner`]: the claim-guarded step (SPEC §5.2), one member of a group transaction.
//!   - `group`: group commit (decision 0024) — a lane's queued steps as the members of one
//!     transaction, each on its own claim, all answered after its commit.
//!   - [`intake`]: a message on a channel → dedup, relay, start or buffer (SPEC §5.1).
//!   - `deliveries`: the delivery dispatcher — timers and every other asked row, with
//!     look-again and `recover` (SPEC §5.6), and the dispatch mark, which poisons the instance
//!     of a delivery that keeps dying with its dispatcher.
//!   - `sweep`: the stuck-instance sweep, and the poisoning of instances whose durable claims
//!     it keeps clearing.
//!   - `admin`: the administrative executor — cancel, restore and poisoning, one at a time
//!     under the admin owner.
//!   - [`leadership`]: who runs each singleton role (SPEC §6): every process on the embedded
//!     store, one replica at a time by lease on a shared one. The dispatcher (`timers`), the
//!     sweep (`instance-sweeper`) and `history`'s purger (`history-purger`) run only while
//!     leading.
//!   - `deploy`: checking and storing deployments, and the one activation path that flips every
//!     lane before intake routes by a version; `converge`: deployments made through another
//!     replica, loaded and activated here.
//!   - [`outbox`]: the outbox worker, and the [`outbox::Sender`] seam the server's transports
//!     implement (SPEC §5.4).
//!   - [`tasks`]: the pull surface: long-polls, completions, failures and extensions of external
//!     tasks (SPEC §5.5).
//! - The top: [`Engine`], the facade that composes the parts and hands each call on.
//!
//! Feature `test-hooks` (off by default) compiles in the crash tests' fault points ([`fault`],
//! `SUTRA_FAULT`) and the lane tests' switches (`test_switches`, `SUTRA_TEST_*`), which break
//! invariants on purpose. Only test builds enable it — `sutra-cli`'s dev-dependencies, forwarded
//! through `sutra-server` — so that no release binary honours them; without it both are empty.
//!
//! [`Store`]: sutra_store::Store

mod admin;
mod answers;
pub mod bulk;
mod config;
mod converge;
mod deliveries;
mod deploy;
mod engine;
mod error;
pub mod fault;
mod group;
mod history;
pub mod history_log;
pub mod intake;
mod lane;
pub mod leadership;
pub mod metrics;
pub mod outbox;
pub mod registry;
mod retirement;
pub mod runner;
pub mod settle;
mod shared;
mod sweep;
pub mod tasks;
mod test_switches;

pub use admin::Restored;
pub use config::EngineConfig;
pub use deploy::{DeployError, Deployed};
pub use engine::Engine;
pub use error::Error;
