//! Decision 0024's lane step, as the engine now runs it: one transaction that claims, writes and
//! releases, committed in groups, and the dispatcher's mark that counts what it hands out and
//! poisons what is never taken.
//!
//! A lane step holds no durable claim, so it is one atomic action: the transaction's first
//! statement locks the instance rows (`FOR NO KEY UPDATE SKIP LOCKED`) and no other step sees
//! them until it commits or rolls back. A crash before the commit changes nothing, which is the
//! state before the action; after it, every member is applied, which is the state after. The
//! model has no replies, so "reply implies committed" is the engine's ordering (answer after
//! `COMMIT` returned), not a property here.
//!
//! How the transaction writes its members does not change the action: one statement per member,
//! or (decision 0059) the members' plain settles kept to the end and written by one statement
//! per row kind, each member's rows joined to its own fenced update. Either way the group lands
//! exactly the members whose claim predicate held, decided on the state before the group
//! ([`Group::plan`]), and a kept member whose fence moved fails the whole transaction, which is
//! the state before the action. The broken form of a set-based write — rows written over the
//! batch rather than over the members whose own claim held — is `GroupIgnoresMemberClaim`, which
//! the check catches (tests/regressions_fail.rs).

use crate::model::ProtocolModel;
use crate::state::{Instance, Replica, RowState, State};

/// What drives one member of a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Driver {
    /// A delivery row the lane's dispatcher handed it.
    Row(u8),
    /// A relay from a transport, which carries no row.
    Relay,
}

/// The members of one group commit, at most one per instance: a bit per row taken, a bit per
/// instance relayed to, and a bit per instance whose member fails (an error in its executor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    pub rows: u8,
    pub relays: u8,
    pub failing: u8,
}

/// What the group's transaction does with one member.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Its row is gone or its instance ended: left out, and the lane forgets the row.
    Stale,
    /// Its executor failed: left out, its row deferred (look-again).
    Fails,
    /// The claim predicate refused it: a row is deferred (look-again), a relay answered 409,
    /// and nothing of it is written.
    Refused,
    /// Its step ran on a snapshot of a poison pill and killed the replica before the commit.
    Kills,
    /// Its writes land: the row taken, the fence raised, the owner cleared.
    Writes,
}

/// One member of a group, as the transaction handles it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Member {
    pub instance: u8,
    pub driver: Driver,
    pub outcome: Outcome,
}

/// The claim statement's predicate for a lane step: `owner IS NULL OR claimed_at < now() -
/// claim_timeout` — no live durable claim, which only an administrative executor holds now. Its
/// `owner = $me` arm never matches for a lane, which holds no durable claim; its row-lock part
/// (`SKIP LOCKED`) is the atomicity of the action.
pub fn free_for_a_step(instance: &Instance) -> bool {
    instance.owner.is_none() || instance.lapsed
}

impl Group {
    fn drives(&self, model: &ProtocolModel, instance: u8) -> Option<Driver> {
        let row = (0..model.setup.rows.len() as u8)
            .find(|&row| self.rows & 1 << row != 0 && model.row_instance(row) == instance);
        match row {
            Some(row) => Some(Driver::Row(row)),
            None => (self.relays & 1 << instance != 0).then_some(Driver::Relay),
        }
    }

    /// The members in the order the claim statement locks them (by instance id), each with what
    /// the transaction will do with it. Members are distinct instances and a write touches only
    /// its own instance's rows, so every outcome can be decided on the state before the group.
    pub fn plan(&self, model: &ProtocolModel, state: &State) -> Vec<Member> {
        let driven = (0..model.setup.instances)
            .filter_map(|instance| Some((instance, self.drives(model, instance)?)));
        driven
            .enumerate()
            .map(|(position, (instance, driver))| Member {
                instance,
                driver,
                outcome: self.outcome(model, state, position == 0, instance, driver),
            })
            .collect()
    }

    fn outcome(
        &self,
        model: &ProtocolModel,
        state: &State,
        first: bool,
        instance: u8,
        driver: Driver,
    ) -> Outcome {
        let claimed = &state.instances[instance as usize];
        let row = match driver {
            Driver::Row(row) => Some(row),
            Driver::Relay => None,
        };
        let gone = row.is_some_and(|row| !state.rows[row as usize].state.pending());
        let checked = first || model.protocol.group_checks_every_member();
        if gone || claimed.ended {
            Outcome::Stale
        } else if self.failing & 1 << instance != 0 {
            Outcome::Fails
        } else if checked && !free_for_a_step(claimed) {
            Outcome::Refused
        } else if row.is_some_and(|row| model.setup.rows[row as usize].kills) {
            Outcome::Kills
        } else {
            Outcome::Writes
        }
    }
}

/// Every group a replica's lane may commit now: each instance driven by one of the rows the
/// replica holds for it, by a relay (while the budget lasts), or not at all; and each fresh
/// member may fail while the failure budget lasts. A lane holds no state between groups, so the
/// replica's lanes are interchangeable and the action does not name one.
pub fn group_actions(model: &ProtocolModel, state: &State, r: u8, groups: &mut Vec<Group>) {
    let mut choices = vec![Group {
        rows: 0,
        relays: 0,
        failing: 0,
    }];
    for instance in 0..model.setup.instances {
        let drivers = drivers(model, state, r, instance);
        choices = (choices.iter())
            .flat_map(|group| {
                drivers
                    .iter()
                    .map(move |driver| with(*group, instance, *driver))
            })
            .collect();
    }
    let relays_allowed = |group: &Group| group.relays.count_ones() <= state.budget.resumes as u32;
    for group in choices.into_iter().filter(relays_allowed) {
        let members = group.plan(model, state);
        if members.is_empty() {
            continue;
        }
        if state.budget.failures > 0 {
            let fresh = members
                .iter()
                .filter(|member| member.outcome != Outcome::Stale);
            groups.extend(fresh.map(|member| Group {
                failing: 1 << member.instance,
                ..group
            }));
        }
        groups.push(group);
    }
}

/// What may drive `instance` in a group of replica `r`: nothing, a row its dispatcher handed
/// it (within the refusal bound), or a relay.
fn drivers(model: &ProtocolModel, state: &State, r: u8, instance: u8) -> Vec<Option<Driver>> {
    let replica = &state.replicas[r as usize];
    let free = free_for_a_step(&state.instances[instance as usize]);
    let rows = (0..model.setup.rows.len() as u8)
        .filter(|&row| model.row_instance(row) == instance)
        .filter(|&row| model.dispatchable(state, replica, row))
        .filter(|&row| free || state.rows[row as usize].refusals < model.setup.refusals)
        .map(Driver::Row);
    let relay = (state.budget.resumes > 0).then_some(Driver::Relay);
    std::iter::once(None)
        .chain(rows.chain(relay).map(Some))
        .collect()
}

/// The group with `instance` driven by `driver` as well (or left out).
fn with(group: Group, instance: u8, driver: Option<Driver>) -> Group {
    match driver {
        None => group,
        Some(Driver::Row(row)) => Group {
            rows: group.rows | 1 << row,
            ..group
        },
        Some(Driver::Relay) => Group {
            relays: group.relays | 1 << instance,
            ..group
        },
    }
}

/// The group's transaction, as planned. A member that kills the replica takes the whole
/// transaction with it: nothing of the group lands.
pub fn commit_group(model: &ProtocolModel, state: &mut State, r: u8, group: Group) {
    let members = group.plan(model, state);
    if members
        .iter()
        .any(|member| member.outcome == Outcome::Kills)
    {
        return model.die(state, r);
    }
    for member in members {
        let row = match member.driver {
            Driver::Row(row) => {
                state.replicas[r as usize].looks &= !(1 << row);
                Some(row)
            }
            Driver::Relay => {
                state.budget.resumes -= 1;
                None
            }
        };
        match member.outcome {
            // A kill ended the transaction above.
            Outcome::Kills => {}
            // A stale member writes nothing; a row still pending (asked of an instance that had
            // ended) is discarded.
            Outcome::Stale => row
                .into_iter()
                .for_each(|row| ProtocolModel::discard(state, row)),
            Outcome::Fails => {
                state.budget.failures -= 1;
                model.defer(state, r, row);
            }
            Outcome::Refused => {
                if let Some(row) = row {
                    model.refused(state, r, row);
                }
            }
            Outcome::Writes => {
                write(model, state, member.instance);
                if let Some(row) = row {
                    model.take_row(state, row, member.instance, Some(r));
                }
            }
        }
    }
}

/// A step's writes to its instance: guarded by the fence the claim statement read (which, in
/// one transaction, is the fence it writes over), it raises the fence and clears any lapsed
/// claim it took over.
fn write(model: &ProtocolModel, state: &mut State, instance: u8) {
    state.history.wrote_under_a_live_claim |= model.live_steps(state, instance) > 0;
    let written = &mut state.instances[instance as usize];
    written.version += 1;
    written.fence += 1;
    written.owner = None;
    written.lapsed = false;
}

/// Due rows a pass marks, with the dispatch count below the bound; a row at the bound waits for
/// `poisonable` instead.
pub fn markable(model: &ProtocolModel, state: &State, row: u8) -> bool {
    state.rows[row as usize].dispatches < model.setup.max_dispatches
}

/// The pass's mark, one transaction per batch: each row it hands out counts one dispatch more
/// and is due again one claim timeout later (the look-again bound), so no other pass hands it
/// out meanwhile.
pub fn mark(state: &mut State, row: u8) {
    let marked = &mut state.rows[row as usize];
    marked.dispatches += 1;
    marked.state = RowState::Marked;
}

/// A row the dispatcher poisons now: due, dispatched to the bound without being taken, and its
/// instance free for a step (a live administrative claim refuses the poisoning as any step).
pub fn poisonable(model: &ProtocolModel, state: &State, row: u8) -> bool {
    let due = &state.rows[row as usize];
    let instance = &state.instances[model.row_instance(row) as usize];
    due.state == RowState::Due
        && due.dispatches >= model.setup.max_dispatches
        && free_for_a_step(instance)
}

/// The poisoning step, one transaction like a lane's: it fails the instance
/// (`SUTRA.RUNTIME.STEP.POISONED`), which ends it and resolves its rows, and asks in the same
/// transaction what its end owes other instances (in every protocol: the model's poisoning
/// belongs to no replica). A row of an instance that had ended is stale: it is discarded.
pub fn poison(model: &ProtocolModel, state: &mut State, row: u8) {
    let instance = model.row_instance(row);
    if state.instances[instance as usize].ended {
        return ProtocolModel::discard(state, row);
    }
    write(model, state, instance);
    model.end(state, instance, None);
}

/// A mark expires: while a live replica holds the row, only its stall lets that happen.
pub fn mark_expires(state: &State, row: u8) -> bool {
    let held = |replica: &Replica| replica.up && replica.looks_at(row);
    state.rows[row as usize].state == RowState::Marked && !state.replicas.iter().any(held)
}
