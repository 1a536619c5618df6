//! A model of Sutra's coordination protocol — claims with fences, commits that release, the
//! owner-blind sweep, look-again after a refusal and `recover` — checked exhaustively by
//! stateright in `cargo test`; and of decision 0024's protocol, in which a lane step is one
//! transaction committed in a group (`one_transaction`), checked before it was built and built
//! since (issue 11: `sutra-engine/src/group.rs`, `sutra-store-sql/src/group.rs`).
//!
//! Why a model: the protocol's failures live in interleavings of crashes, stalls and lanes that
//! no example-based test reaches on purpose (an all-green suite at one lane proves nothing about
//! two). The model mirrors the engine's store statements and dispatcher, and every named
//! property is checked against the protocol and against each plausible regression of it
//! (`Protocol`), which must fail. `docs/protocol.md` holds the prose, the mapping to the engine
//! and the counterexamples.
//!
//! Rows may also be asked by the commit that ends another instance (`RowSpec::asked_by`: issue
//! 33's calls, a child's end reported to its parent and a parent's cancel of its children), in
//! the same action as that end; `EndReachesParent` checks that such an ask reaches its instance,
//! and `Protocol::AskAfterCommit`, which asks after the commit, must fail it.
//!
//! Beside it, and apart from it, a model of the leases that elect one replica per singleton role
//! (`lease`, decision 0041): terms that end on a local deadline, clocks that drift, and the
//! property that no two replicas lead one role at once, checked against the engine's rule and
//! against plausible regressions of it (`LeaseProtocol`), which must fail.

mod check;
mod lease;
mod lease_trace;
mod model;
mod one_transaction;
mod properties;
mod setup;
mod state;
mod trace;

pub use check::{Report, exhaustively, leases_exhaustively, leases_until_failure, until_failure};
pub use lease::{
    LEADERSHIP_PASSES, LeaseAction, LeaseModel, LeaseProtocol, LeaseSetup, ONE_LEADER_PER_ROLE,
};
pub use model::{Action, ProtocolModel};
pub use one_transaction::{Driver, Group, Member, Outcome};
pub use properties::{
    ASKED_IS_TAKEN, CLAIM_NOT_FOREVER, COMMITTED_IMPLIES_UNOWNED, END_REACHES_PARENT, EXCLUSION,
    NO_LOST_COMMIT, POISONED,
};
pub use setup::{Protocol, RowSpec, Setup};
