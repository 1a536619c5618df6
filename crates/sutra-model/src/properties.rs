//! The properties the protocol must keep, named as `docs/protocol.md` names them.
//!
//! Three are safety (`always`), checked in every reachable state. Four are liveness
//! (`eventually`): stateright checks those on every path's terminal state, one where no action
//! is enabled. Every fault is budgeted and every other action makes progress, so every path
//! ends in one; and both predicates are stable (once true, no action falsifies them), so "true
//! somewhere on the path" is "true at its end", which keeps stateright's per-state memo of
//! satisfied `eventually` properties exact.

use stateright::Property;

use crate::model::ProtocolModel;
use crate::setup::RowSpec;
use crate::state::{RowState, State};

pub const EXCLUSION: &str = "Exclusion";
pub const COMMITTED_IMPLIES_UNOWNED: &str = "CommittedImpliesUnowned";
pub const NO_LOST_COMMIT: &str = "NoLostCommit";
pub const ASKED_IS_TAKEN: &str = "AskedIsTaken";
pub const CLAIM_NOT_FOREVER: &str = "ClaimNotForever";
pub const POISONED: &str = "Poisoned";
pub const END_REACHES_PARENT: &str = "EndReachesParent";

pub fn all() -> Vec<Property<ProtocolModel>> {
    vec![
        Property::always(EXCLUSION, exclusion),
        Property::always(COMMITTED_IMPLIES_UNOWNED, committed_implies_unowned),
        Property::always(NO_LOST_COMMIT, no_lost_commit),
        Property::eventually(ASKED_IS_TAKEN, asked_is_taken),
        Property::eventually(CLAIM_NOT_FOREVER, claim_not_forever),
        Property::eventually(POISONED, poisoned),
        Property::eventually(END_REACHES_PARENT, end_reaches_parent),
    ]
}

/// At most one step is in flight on an instance under a claim that has not lapsed, and no commit
/// ever landed from a fence other than the instance's current one. A one-transaction step is in
/// flight only within its action, so for it the first clause reads: it never wrote an instance
/// while another step held a claim on it that had not lapsed.
fn exclusion(model: &ProtocolModel, state: &State) -> bool {
    let history = &state.history;
    !history.stale_fence_commit
        && !history.wrote_under_a_live_claim
        && (0..model.setup.instances).all(|i| model.live_steps(state, i) <= 1)
}

/// An instance is owned only while a step in flight holds its claim, or while its holder is
/// dead: a live process that is done with a step has left the instance unowned, so a commit
/// and the release of its claim are one fact, and every other exit releases too.
fn committed_implies_unowned(model: &ProtocolModel, state: &State) -> bool {
    (0..model.setup.instances).all(|i| match &state.instances[i as usize].owner {
        None => true,
        Some(owner) => model.claim_is_held(state, i) || !model.alive(state, owner),
    })
}

/// A commit lands only on the version its step read: no step's commit is ever overwritten by
/// one that rehydrated the instance before it. Its sharpest case: once a holder's claim lapsed
/// and another owner took the instance, the lapsed holder's commit is refused.
fn no_lost_commit(_: &ProtocolModel, state: &State) -> bool {
    !state.history.lost_commit
}

/// Every asked row is taken by a commit, or resolved because its instance ended.
fn asked_is_taken(_: &ProtocolModel, state: &State) -> bool {
    state.rows.iter().all(|row| !row.state.pending())
}

/// Once the last crash has happened, no instance is still claimed by a process that died: a
/// dead holder's claim lapses, and the sweep (or a claimant taking the lapsed claim) clears it.
fn claim_not_forever(model: &ProtocolModel, state: &State) -> bool {
    let held_by_the_dead = |owner: &_| !model.alive(state, owner);
    state.budget.crashes == 0
        && (state.instances.iter())
            .all(|instance| !instance.owner.as_ref().is_some_and(held_by_the_dead))
}

/// A poison pill does not stop its instance forever: a row whose step kills every replica that
/// runs it is dispatched again until the dispatcher's count poisons its instance, or another row
/// ends the instance first. Vacuous in a world without a pill.
fn poisoned(model: &ProtocolModel, state: &State) -> bool {
    let pills = model.setup.rows.iter().filter(|spec: &&RowSpec| spec.kills);
    pills
        .into_iter()
        .all(|spec| state.instances[spec.instance as usize].ended)
}

/// What an instance's end asks of another instance reaches it: every row asked by an ending
/// commit (a child's `child_ended` report, a parent's `cancel`) is asked and then taken by a
/// commit, or resolved (its instance ended, or it was stale and discarded). Vacuous in a world
/// without such rows.
///
/// Stated so that it is false until it is met, and stable once it is: every instance that owes
/// a row has ended, and each row it owes is taken or resolved. (stateright meets an `eventually`
/// at any state of a path, so "every row asked by an ended instance …" would be met at the
/// start, where nothing has ended.) In the call world every instance ends on every path — each
/// has a row due from the start that ends it, and AskedIsTaken holds — so there the two
/// readings agree on every terminal state.
fn end_reaches_parent(model: &ProtocolModel, state: &State) -> bool {
    let reached = |(spec, row): (&RowSpec, &crate::state::Row)| match spec.asked_by {
        None => true,
        Some(asker) => {
            state.instances[asker as usize].ended
                && matches!(row.state, RowState::Taken | RowState::Resolved)
        }
    };
    model.setup.rows.iter().zip(&state.rows).all(reached)
}
