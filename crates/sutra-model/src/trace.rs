//! Counterexamples as a reviewer reads them: one numbered line per action, saying what the
//! action did in the engine's words (claimed at fence 2, refused, ClaimLost, …), not the raw
//! action and state dumps stateright prints.

use stateright::Path;

use crate::model::{Action, ProtocolModel};
use crate::one_transaction::{Driver, Group, Member, Outcome};
use crate::state::{Instance, Owner, RowState, Slot, State, Step};

pub fn narrate(model: &ProtocolModel, path: &Path<State, Action>) -> String {
    let steps = path.clone().into_vec();
    let actions = steps.windows(2).enumerate().map(|(i, pair)| {
        let [(before, Some(action)), (after, _)] = pair else {
            unreachable!("every state but the last has the action taken from it");
        };
        let told = describe(model, before, *action, after);
        let effects = asks(model, before, *action, after);
        format!("{:>2}. {told}{effects}", i + 1)
    });
    let start = format!(" 0. start: {}", asked(model));
    let end = format!("    end: {}", summary(path.last_state()));
    let lines: Vec<_> = std::iter::once(start).chain(actions).chain([end]).collect();
    lines.join("\n")
}

fn asked(model: &ProtocolModel) -> String {
    let rows = model.setup.rows.iter().enumerate().map(|(row, spec)| {
        let ends = if spec.ends { ", ends it" } else { "" };
        let kills = if spec.kills { ", kills its step" } else { "" };
        match spec.asked_by {
            None => format!(
                "row {row} for instance {} asked of r{}{ends}{kills}",
                spec.instance, spec.asker
            ),
            Some(asker) => format!(
                "row {row} for instance {} to be asked by instance {asker}'s end{ends}{kills}",
                spec.instance
            ),
        }
    });
    rows.collect::<Vec<_>>().join("; ")
}

/// The instances' claims and the rows' fate: what a reader checks the property against.
fn summary(state: &State) -> String {
    let instances = state.instances.iter().enumerate().map(|(i, instance)| {
        let held = instance
            .owner
            .map_or("unowned".to_owned(), |o| format!("owned by {}", owner(o)));
        let lapsed = if instance.lapsed { " (lapsed)" } else { "" };
        format!("instance {i} {held}{lapsed} at fence {}", instance.fence)
    });
    let rows = state.rows.iter().enumerate().map(|(row, r)| {
        let lookers: Vec<_> = (state.replicas.iter().enumerate())
            .filter(|(_, replica)| replica.looks_at(row as u8))
            .map(|(i, _)| format!("r{i}"))
            .collect();
        let looked = match (r.state.pending(), lookers.is_empty()) {
            (false, _) => String::new(),
            (true, true) => ", looked at by no one".to_owned(),
            (true, false) => format!(", looked at by {}", lookers.join(" and ")),
        };
        format!("row {row} {:?}{looked}", r.state).to_lowercase()
    });
    instances.chain(rows).collect::<Vec<_>>().join("; ")
}

fn describe(model: &ProtocolModel, before: &State, action: Action, after: &State) -> String {
    match action {
        Action::Recover { replica } => {
            let seen =
                after.replicas[replica as usize].looks & !before.replicas[replica as usize].looks;
            if model.protocol.one_transaction_steps() {
                let marked = (0..8).filter(|row| seen & 1 << row != 0).map(|row| {
                    let dispatches = after.rows[row as usize].dispatches;
                    format!("row {row} (dispatch {dispatches})")
                });
                let marked: Vec<_> = marked.collect();
                format!(
                    "r{replica} dispatcher passes over the table: marks {}",
                    marked.join(", ")
                )
            } else {
                format!(
                    "r{replica} dispatcher passes over the table: sees {}",
                    rows(seen)
                )
            }
        }
        Action::Take { replica, lane, row } => {
            let who = format!("r{replica} lane-{lane} takes row {row}");
            let instance = model.row_instance(row);
            claimed(model, before, after, replica, lane, &who, instance)
        }
        Action::Resume {
            replica,
            executor,
            instance,
        } => {
            let what = if model.is_lane(executor) {
                "relays to"
            } else {
                "administers"
            };
            let who = format!(
                "r{replica} {} {what} instance {instance}",
                executor_name(model, executor)
            );
            claimed(model, before, after, replica, executor, &who, instance)
        }
        Action::Commit { replica, executor } => {
            let step = in_flight(before, replica, executor);
            let landed = after.instances[step.instance as usize].version
                != before.instances[step.instance as usize].version;
            let outcome = if landed {
                let ended = if after.instances[step.instance as usize].ended {
                    ", ends the instance"
                } else {
                    ""
                };
                format!("lands: takes {}, clears the owner{ended}", consumed(step))
            } else {
                format!(
                    "is refused (ClaimLost), rolls back; {} deferred",
                    consumed(step)
                )
            };
            format!(
                "r{replica} {} commits instance {} from fence {}: {outcome}",
                executor_name(model, executor),
                step.instance,
                step.fence
            )
        }
        Action::Release { replica, executor } => {
            let step = in_flight(before, replica, executor);
            let why = if step.stale {
                "its delivery is stale"
            } else {
                "the step failed"
            };
            let released = before.instances[step.instance as usize].owner.is_some()
                && after.instances[step.instance as usize].owner.is_none();
            let effect = if released {
                "releases"
            } else {
                "releases nothing (claim already lost)"
            };
            format!(
                "r{replica} {}: {why}; {effect} instance {} (fence {})",
                executor_name(model, executor),
                step.instance,
                step.fence
            )
        }
        Action::Crash { replica } => {
            format!("r{replica} crashes: in-flight steps and looks lost, its claims stay")
        }
        Action::Restart { replica } => format!(
            "r{replica} restarts as incarnation {}",
            after.replicas[replica as usize].incarnation
        ),
        Action::Stall { replica } => {
            format!("r{replica} stalls past the claim timeout: its claims lapse while it lives")
        }
        Action::Lapse { instance } => format!("instance {instance}'s orphaned claim lapses"),
        Action::Sweep => "the sweep clears every lapsed claim".to_owned(),
        Action::ComeDue { row } if before.rows[row as usize].state == RowState::Marked => {
            format!("row {row}'s mark expires: it is due again")
        }
        Action::ComeDue { row } => format!("row {row}'s deferred attempt comes due"),
        Action::Group { replica, group } => commits_a_group(model, before, replica, group),
        Action::Ask { replica, row } => format!(
            "r{replica} writes the ask its commit left for afterwards: row {row} for instance {}, \
             due",
            model.row_instance(row)
        ),
        Action::Poison { row } => format!(
            "the dispatcher poisons instance {}: row {row} dispatched {} times, never taken; \
             the instance fails and its rows are resolved",
            model.row_instance(row),
            before.rows[row as usize].dispatches
        ),
    }
}

/// What an action did to rows beyond the one it consumed: the asks an ending commit made in its
/// own transaction (or, in `AskAfterCommit`, left for a separate write), and stale rows
/// discarded.
fn asks(model: &ProtocolModel, before: &State, action: Action, after: &State) -> String {
    let mut told = String::new();
    for row in 0..before.rows.len() {
        let (was, is) = (before.rows[row].state, after.rows[row].state);
        let instance = model.row_instance(row as u8);
        if was == RowState::Unasked && is == RowState::Due && !matches!(action, Action::Ask { .. })
        {
            told += &format!("; in the same transaction asks row {row} of instance {instance}");
        }
        let ended_before = before.instances[instance as usize].ended;
        if was.pending() && is == RowState::Resolved && ended_before {
            told += &format!("; discards row {row} (stale: instance {instance} had ended)");
        }
        let owed = |state: &State| state.replicas.iter().any(|r| r.owes & 1 << row != 0);
        if !owed(before) && owed(after) {
            told += &format!(
                "; leaves the ask of row {row} (for instance {instance}) to a write after the commit"
            );
        }
    }
    told
}

fn commits_a_group(model: &ProtocolModel, before: &State, replica: u8, group: Group) -> String {
    let members = group.plan(model, before);
    if let Some(pill) = members.iter().find(|m| m.outcome == Outcome::Kills) {
        return format!(
            "r{replica} runs a group on a lane: {}'s step kills the replica before the commit; \
             nothing of the group lands",
            driven(pill)
        );
    }
    let members = members.iter().map(|member| {
        let claimed = &before.instances[member.instance as usize];
        format!("{}: {}", driven(member), member_outcome(member, claimed))
    });
    format!(
        "r{replica} commits a group on a lane: {}",
        members.collect::<Vec<_>>().join("; ")
    )
}

fn driven(member: &Member) -> String {
    match member.driver {
        Driver::Row(row) => format!("row {row} → instance {}", member.instance),
        Driver::Relay => format!("relay → instance {}", member.instance),
    }
}

fn member_outcome(member: &Member, claimed: &Instance) -> String {
    let holder = claimed.owner.map_or("?".to_owned(), owner);
    match (member.outcome, member.driver) {
        (Outcome::Stale, _) => "stale, left out".to_owned(),
        (Outcome::Fails, Driver::Row(row)) => format!("fails, left out; row {row} deferred"),
        (Outcome::Fails, Driver::Relay) => "fails, left out".to_owned(),
        (Outcome::Refused, Driver::Row(row)) => {
            format!("refused (CLAIM_HELD by {holder}); row {row} deferred (look again)")
        }
        (Outcome::Refused, Driver::Relay) => {
            format!("refused (CLAIM_HELD by {holder}), answered 409")
        }
        (Outcome::Kills, _) => "kills the replica".to_owned(),
        (Outcome::Writes, driver) => {
            let over = match claimed.owner {
                Some(_) if !claimed.lapsed => format!(" over {holder}'s live claim"),
                Some(_) => format!(" over {holder}'s lapsed claim"),
                None => String::new(),
            };
            let takes = match driver {
                Driver::Row(row) => format!(", takes row {row}"),
                Driver::Relay => String::new(),
            };
            format!("writes{over}{takes}, fence {}", claimed.fence + 1)
        }
    }
}

fn claimed(
    model: &ProtocolModel,
    before: &State,
    after: &State,
    replica: u8,
    executor: u8,
    who: &str,
    instance: u8,
) -> String {
    let Some(step) = &after.replicas[replica as usize].executors[executor as usize] else {
        let holder = before.instances[instance as usize]
            .owner
            .map_or("?".to_owned(), owner);
        return format!(
            "{who}: refused (CLAIM_HELD by {holder}){}",
            refusal(before, after)
        );
    };
    let me = owner(model.owner(after, replica, executor));
    let stale = if step.stale {
        "; the delivery is stale"
    } else {
        ""
    };
    format!("{who}: claims as {me}, fence {}{stale}", step.fence)
}

fn refusal(before: &State, after: &State) -> String {
    let changed = before
        .rows
        .iter()
        .zip(&after.rows)
        .position(|(b, a)| b.state != a.state);
    match changed.map(|row| (row, after.rows[row].state)) {
        Some((row, RowState::Deferred)) => format!("; row {row} deferred (look again)"),
        Some((row, RowState::Parked)) => format!("; row {row} parked for a hand-over"),
        _ => String::new(),
    }
}

fn in_flight(state: &State, replica: u8, executor: u8) -> &Step {
    state.replicas[replica as usize].executors[executor as usize]
        .as_ref()
        .expect("commit and release act on a step in flight")
}

fn consumed(step: &Step) -> String {
    step.row
        .map_or("no row".to_owned(), |row| format!("row {row}"))
}

fn executor_name(model: &ProtocolModel, executor: u8) -> String {
    if model.is_lane(executor) {
        format!("lane-{executor}")
    } else {
        format!("admin#{}", executor - model.setup.lanes)
    }
}

fn owner(owner: Owner) -> String {
    let replica = format!("r{}.{}", owner.replica, owner.incarnation);
    match owner.slot {
        Slot::Lane(lane) => format!("{replica}/lane-{lane}"),
        Slot::Process => replica,
        Slot::Admin => format!("{replica}/admin"),
    }
}

fn rows(bits: u8) -> String {
    let listed: Vec<_> = (0..8)
        .filter(|row| bits & 1 << row != 0)
        .map(|row| format!("row {row}"))
        .collect();
    listed.join(", ")
}
