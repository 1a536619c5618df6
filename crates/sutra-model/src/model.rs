//! The transitions of the protocol, one action per atomic step of the engine: a store statement
//! or transaction (claim, commit, release, sweep, defer), a dispatcher pass, or an event of the
//! environment (a crash, a restart, a stall, time passing). `docs/protocol.md` maps each action
//! to the engine function that implements it.
//!
//! The predicates are written the way the SQL is (`may_claim` is the claim's `WHERE`,
//! `is_current` the commit's and the release's), so that a reviewer can hold one against the
//! other.

use stateright::{Model, Property};

use crate::one_transaction::{self, Group};
use crate::properties;
use crate::setup::{Protocol, RowSpec, Setup};
use crate::state::{Budget, History, Instance, Owner, Replica, Row, RowState, Slot, State, Step};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A dispatcher pass over every due row: the first pass at start (`recover`), each poll,
    /// each wake-up after a sweep. In `OneTransaction` it marks each row it hands out.
    Recover { replica: u8 },
    /// A lane takes a row its dispatcher looked at: it claims the instance, or is refused and
    /// looks again.
    Take { replica: u8, lane: u8, row: u8 },
    /// A resume that carries no row: a relay on a lane, an administrative operation on an admin
    /// executor. A refusal answers 409 and writes nothing.
    Resume {
        replica: u8,
        executor: u8,
        instance: u8,
    },
    /// The step's transaction: conditional on the claim, it takes the row and clears the owner.
    Commit { replica: u8, executor: u8 },
    /// The step ends without committing (a stale delivery, an error, a panic) and releases.
    Release { replica: u8, executor: u8 },
    /// The process dies: its memory and in-flight steps are gone, its claims stay.
    Crash { replica: u8 },
    /// The process starts again, under a new replica id.
    Restart { replica: u8 },
    /// The process freezes long enough for its claims to lapse, then carries on.
    Stall { replica: u8 },
    /// A claim whose holder died grows older than the claim timeout.
    Lapse { instance: u8 },
    /// The stuck-instance sweep clears every lapsed claim, owner-blind.
    Sweep,
    /// A deferred row's next attempt comes due, or a marked row's mark expires.
    ComeDue { row: u8 },
    /// `OneTransaction`: a lane commits a group of one-transaction steps.
    Group { replica: u8, group: Group },
    /// `OneTransaction`: the dispatcher fails the instance of a row dispatched to the bound
    /// without being taken.
    Poison { row: u8 },
    /// `AskAfterCommit`: the replica writes an ask its ending commit left for afterwards.
    Ask { replica: u8, row: u8 },
}

#[derive(Clone, Debug)]
pub struct ProtocolModel {
    pub protocol: Protocol,
    pub setup: Setup,
}

impl ProtocolModel {
    pub fn new(protocol: Protocol, setup: Setup) -> ProtocolModel {
        ProtocolModel { protocol, setup }
    }

    pub fn is_lane(&self, executor: u8) -> bool {
        executor < self.setup.lanes
    }

    /// The owner id an executor claims under.
    pub fn owner(&self, state: &State, replica: u8, executor: u8) -> Owner {
        let slot = match (self.is_lane(executor), self.protocol.owner_per_lane()) {
            (false, _) => Slot::Admin,
            (true, true) => Slot::Lane(executor),
            (true, false) => Slot::Process,
        };
        Owner {
            replica,
            incarnation: state.replicas[replica as usize].incarnation,
            slot,
        }
    }

    pub fn row_instance(&self, row: u8) -> u8 {
        self.setup.rows[row as usize].instance
    }

    /// Whether the owner's process is still the one that took the claim.
    pub fn alive(&self, state: &State, owner: &Owner) -> bool {
        let replica = &state.replicas[owner.replica as usize];
        replica.up && replica.incarnation == owner.incarnation
    }

    /// Whether some step in flight holds the instance's current claim (a fence names one claim).
    pub fn claim_is_held(&self, state: &State, instance: u8) -> bool {
        let fence = state.instances[instance as usize].fence;
        state
            .replicas
            .iter()
            .flat_map(Replica::steps)
            .any(|step| step.instance == instance && step.fence == fence)
    }

    /// Steps in flight on the instance under a claim that has not lapsed.
    pub fn live_steps(&self, state: &State, instance: u8) -> usize {
        (state.replicas.iter())
            .flat_map(Replica::steps)
            .filter(|step| step.instance == instance && !step.lapsed)
            .count()
    }

    fn executors(&self) -> u8 {
        self.setup.lanes + self.protocol.admin_executors()
    }

    /// A row a lane may take now: in hand, and not waiting for a later due time.
    pub fn dispatchable(&self, state: &State, replica: &Replica, row: u8) -> bool {
        replica.looks_at(row)
            && !matches!(
                state.rows[row as usize].state,
                RowState::Deferred | RowState::Parked
            )
    }

    /// The bound on refusals: past it, a lane only takes a row whose claim is free to it.
    fn may_attempt(&self, state: &State, owner: &Owner, row: u8) -> bool {
        let instance = &state.instances[self.row_instance(row) as usize];
        may_claim(instance, owner) || state.rows[row as usize].refusals < self.setup.refusals
    }

    /// Due rows the replica does not already look at or have in flight: what a pass would add.
    /// A pass that marks skips rows dispatched to the bound: they are the poisoning's.
    fn unseen_due_rows(&self, state: &State, replica: &Replica) -> u8 {
        let marks = self.protocol.one_transaction_steps();
        (0..state.rows.len() as u8)
            .filter(|&row| state.rows[row as usize].state == RowState::Due)
            .filter(|&row| !replica.looks_at(row) && !replica.in_flight(row))
            .filter(|&row| !marks || one_transaction::markable(self, state, row))
            .fold(0, |bits, row| bits | 1 << row)
    }

    /// The pass: the replica will hand every unseen due row to a lane, marking each first when
    /// the protocol counts dispatches.
    fn recover(&self, state: &mut State, r: u8) {
        let seen = self.unseen_due_rows(state, &state.replicas[r as usize]);
        state.replicas[r as usize].looks |= seen;
        if self.protocol.one_transaction_steps() {
            (0..state.rows.len() as u8)
                .filter(|row| seen & 1 << row != 0)
                .for_each(|row| one_transaction::mark(state, row));
        }
    }

    fn replica_actions(&self, state: &State, r: u8, actions: &mut Vec<Action>) {
        let replica = &state.replicas[r as usize];
        if !replica.up {
            actions.push(Action::Restart { replica: r });
            return;
        }
        if self.protocol.passes_over_the_table() && self.unseen_due_rows(state, replica) != 0 {
            actions.push(Action::Recover { replica: r });
        }
        let one_transaction = self.protocol.one_transaction_steps();
        for executor in 0..self.executors() {
            match &replica.executors[executor as usize] {
                None if one_transaction && self.is_lane(executor) => {}
                None => self.idle_actions(state, r, executor, actions),
                Some(step) => {
                    if !step.stale {
                        actions.push(Action::Commit {
                            replica: r,
                            executor,
                        });
                    }
                    if step.stale || state.budget.failures > 0 {
                        actions.push(Action::Release {
                            replica: r,
                            executor,
                        });
                    }
                }
            }
        }
        if one_transaction {
            let mut groups = Vec::new();
            one_transaction::group_actions(self, state, r, &mut groups);
            actions.extend(
                groups
                    .into_iter()
                    .map(|group| Action::Group { replica: r, group }),
            );
        }
        for row in 0..state.rows.len() as u8 {
            if replica.owes & 1 << row != 0 {
                actions.push(Action::Ask { replica: r, row });
            }
        }
        if state.budget.crashes > 0 {
            actions.push(Action::Crash { replica: r });
        }
        if state.budget.stalls > 0 && self.may_stall(state, replica) {
            actions.push(Action::Stall { replica: r });
        }
    }

    /// A stall changes something only for a replica with a claim or a mark that can lapse.
    fn may_stall(&self, state: &State, replica: &Replica) -> bool {
        let marked = |row: u8| state.rows[row as usize].state == RowState::Marked;
        replica.steps().any(|step| !step.lapsed)
            || (0..state.rows.len() as u8).any(|row| replica.looks_at(row) && marked(row))
    }

    fn idle_actions(&self, state: &State, r: u8, executor: u8, actions: &mut Vec<Action>) {
        let replica = &state.replicas[r as usize];
        let owner = self.owner(state, r, executor);
        if self.is_lane(executor) {
            for row in 0..state.rows.len() as u8 {
                if self.dispatchable(state, replica, row) && self.may_attempt(state, &owner, row) {
                    actions.push(Action::Take {
                        replica: r,
                        lane: executor,
                        row,
                    });
                }
            }
        }
        if state.budget.resumes > 0 {
            for instance in 0..self.setup.instances {
                actions.push(Action::Resume {
                    replica: r,
                    executor,
                    instance,
                });
            }
        }
    }

    fn take(&self, state: &mut State, r: u8, lane: u8, row: u8) {
        state.replicas[r as usize].looks &= !(1 << row);
        if !self.try_claim(state, r, lane, self.row_instance(row), Some(row)) {
            self.refused(state, r, row);
        }
    }

    /// A refused relay or administrative operation answers 409 and writes nothing.
    fn resume(&self, state: &mut State, r: u8, executor: u8, instance: u8) {
        state.budget.resumes -= 1;
        self.try_claim(state, r, executor, instance, None);
    }

    /// Claims the instance for the executor and begins its step; `false` for a refusal.
    fn try_claim(
        &self,
        state: &mut State,
        r: u8,
        executor: u8,
        instance: u8,
        row: Option<u8>,
    ) -> bool {
        let owner = self.owner(state, r, executor);
        let Some(fence) = claim(&mut state.instances[instance as usize], owner) else {
            return false;
        };
        let fresh = row.is_none_or(|row| state.rows[row as usize].state.pending());
        let claimed = &state.instances[instance as usize];
        state.replicas[r as usize].executors[executor as usize] = Some(Step {
            instance,
            row,
            fence,
            read: claimed.version,
            lapsed: false,
            stale: !fresh || claimed.ended,
        });
        true
    }

    /// CLAIM_HELD: the row's next attempt is scheduled (and this process keeps a look for it),
    /// or, without look-again, it waits for the holder's hand-over. A deferral shows that a lane
    /// handled the row, so its dispatch count starts again.
    pub fn refused(&self, state: &mut State, r: u8, row: u8) {
        let deferred = &mut state.rows[row as usize];
        if !deferred.state.pending() {
            return;
        }
        deferred.refusals += 1;
        deferred.dispatches = 0;
        if self.protocol.looks_again() {
            deferred.state = RowState::Deferred;
            state.replicas[r as usize].looks |= 1 << row;
        } else {
            deferred.state = RowState::Parked;
        }
    }

    /// Any other failed attempt: `look_again` defers the row, whatever the protocol.
    pub fn defer(&self, state: &mut State, r: u8, row: Option<u8>) {
        let Some(row) = row else { return };
        if state.rows[row as usize].state.pending() {
            state.rows[row as usize].state = RowState::Deferred;
            state.rows[row as usize].dispatches = 0;
            state.replicas[r as usize].looks |= 1 << row;
        }
    }

    fn commit(&self, state: &mut State, r: u8, executor: u8) {
        let owner = self.owner(state, r, executor);
        let step = state.replicas[r as usize].executors[executor as usize]
            .take()
            .expect("only a step commits");
        let instance = &mut state.instances[step.instance as usize];
        if !self.commit_lands(instance, &owner, &step) {
            // ClaimLost: the transaction rolled back; the release finds nothing to release.
            return self.defer(state, r, step.row);
        }
        state.history.stale_fence_commit |= step.fence != instance.fence;
        state.history.lost_commit |= step.read != instance.version;
        instance.version += 1;
        instance.owner = None;
        instance.lapsed = false;
        if let Some(row) = step.row {
            self.take_row(state, row, step.instance, Some(r));
        }
        self.hand_over(state, step.instance);
    }

    /// The commit of replica `by` deletes the row it consumed, and ends the instance if the row
    /// does.
    pub fn take_row(&self, state: &mut State, row: u8, instance: u8, by: Option<u8>) {
        state.rows[row as usize].state = RowState::Taken;
        if self.setup.rows[row as usize].ends {
            self.end(state, instance, by);
        }
    }

    fn commit_lands(&self, instance: &Instance, owner: &Owner, step: &Step) -> bool {
        !self.protocol.commit_checks_the_claim() || is_current(instance, owner, step.fence)
    }

    /// The ending step disarms every park: the instance's other rows are deleted in its commit.
    /// The same commit asks every row the instance's end owes another instance (a child's report
    /// to its parent, a parent's cancel of its children), whether or not that instance has ended
    /// meanwhile (a concurrent end is not seen under READ COMMITTED; its row is then stale).
    /// `by` is the replica whose commit it is (`None` for the dispatcher's poisoning); under
    /// `AskAfterCommit` it owes the asks instead, to write after the commit.
    pub fn end(&self, state: &mut State, instance: u8, by: Option<u8>) {
        state.instances[instance as usize].ended = true;
        for (row, spec) in state.rows.iter_mut().zip(&self.setup.rows) {
            if spec.instance == instance && row.state.pending() {
                row.state = RowState::Resolved;
            }
        }
        for row in 0..self.setup.rows.len() as u8 {
            if self.setup.rows[row as usize].asked_by != Some(instance) {
                continue;
            }
            match by {
                Some(r) if !self.protocol.asks_in_the_commit() => {
                    state.replicas[r as usize].owes |= 1 << row;
                }
                _ => Self::ask(state, row, by),
            }
        }
    }

    /// A row not asked yet is written, due now; the replica whose commit wrote it hands it to
    /// its own dispatcher (`due_now`), so that only a crash leaves it to a pass over the table.
    pub fn ask(state: &mut State, row: u8, by: Option<u8>) {
        if state.rows[row as usize].state != RowState::Unasked {
            return;
        }
        state.rows[row as usize].state = RowState::Due;
        if let Some(r) = by {
            state.replicas[r as usize].looks |= 1 << row;
        }
    }

    /// `AskAfterCommit`: the separate write of an ask the commit left for afterwards.
    fn ask_after_commit(state: &mut State, r: u8, row: u8) {
        state.replicas[r as usize].owes &= !(1 << row);
        Self::ask(state, row, Some(r));
    }

    /// A stale delivery — asked of an instance that had ended — is deleted by the step that
    /// finds it stale (`discard`). A row already taken or resolved is left as it is.
    pub fn discard(state: &mut State, row: u8) {
        if state.rows[row as usize].state.pending() {
            state.rows[row as usize].state = RowState::Resolved;
        }
    }

    /// Parked rows become due once the instance is free again (only `NoLookAgain` parks any).
    fn hand_over(&self, state: &mut State, instance: u8) {
        for (row, spec) in state.rows.iter_mut().zip(&self.setup.rows) {
            if spec.instance == instance && row.state == RowState::Parked {
                row.state = RowState::Due;
            }
        }
    }

    fn release(&self, state: &mut State, r: u8, executor: u8) {
        let owner = self.owner(state, r, executor);
        let step = state.replicas[r as usize].executors[executor as usize]
            .take()
            .expect("only a step releases");
        let instance = &mut state.instances[step.instance as usize];
        if is_current(instance, &owner, step.fence) {
            instance.owner = None;
            instance.lapsed = false;
            self.hand_over(state, step.instance);
        }
        if step.stale {
            step.row
                .into_iter()
                .for_each(|row| Self::discard(state, row));
        } else {
            state.budget.failures -= 1;
            self.defer(state, r, step.row);
        }
    }

    fn crash(&self, state: &mut State, r: u8) {
        state.budget.crashes -= 1;
        self.die(state, r);
    }

    /// The process is gone: its steps and looks with it, its claims stay.
    pub fn die(&self, state: &mut State, r: u8) {
        let replica = &mut state.replicas[r as usize];
        replica.up = false;
        replica.looks = 0;
        replica.owes = 0;
        replica
            .executors
            .iter_mut()
            .for_each(|executor| *executor = None);
    }

    fn restart(&self, state: &mut State, r: u8) {
        let replica = &mut state.replicas[r as usize];
        replica.up = true;
        replica.incarnation += 1;
    }

    /// Every claim the frozen process holds lapses, while it still believes it holds them; so
    /// does every mark on a row it holds, so that another pass may hand the row out again.
    fn stall(&self, state: &mut State, r: u8) {
        state.budget.stalls -= 1;
        for (row, held) in state.rows.iter_mut().enumerate() {
            if held.state == RowState::Marked && state.replicas[r as usize].looks_at(row as u8) {
                held.state = RowState::Due;
            }
        }
        for executor in 0..self.executors() {
            let owner = self.owner(state, r, executor);
            let Some(step) = &mut state.replicas[r as usize].executors[executor as usize] else {
                continue;
            };
            step.lapsed = true;
            let instance = &mut state.instances[step.instance as usize];
            if is_current(instance, &owner, step.fence) {
                instance.lapsed = true;
            }
        }
    }

    fn sweep(state: &mut State) {
        for instance in &mut state.instances {
            if instance.owner.is_some() && instance.lapsed {
                instance.owner = None;
                instance.lapsed = false;
            }
        }
    }

    fn world_actions(&self, state: &State, actions: &mut Vec<Action>) {
        for (i, instance) in state.instances.iter().enumerate() {
            let instance_id = i as u8;
            if instance.owner.is_some()
                && !instance.lapsed
                && !self.claim_is_held(state, instance_id)
            {
                actions.push(Action::Lapse {
                    instance: instance_id,
                });
            }
        }
        let sweeper_lives = state.replicas.iter().any(|replica| replica.up);
        let lapsed = |instance: &Instance| instance.owner.is_some() && instance.lapsed;
        if sweeper_lives && state.instances.iter().any(lapsed) {
            actions.push(Action::Sweep);
        }
        for row in 0..state.rows.len() as u8 {
            let deferred = state.rows[row as usize].state == RowState::Deferred;
            if deferred || one_transaction::mark_expires(state, row) {
                actions.push(Action::ComeDue { row });
            }
        }
        if self.protocol.one_transaction_steps() && sweeper_lives {
            let poisonable = |&row: &u8| one_transaction::poisonable(self, state, row);
            let rows = (0..state.rows.len() as u8).filter(poisonable);
            actions.extend(rows.map(|row| Action::Poison { row }));
        }
    }
}

/// The claim's compare-and-set: `UPDATE … SET owner = $me, fence = fence + 1 WHERE owner IS NULL
/// OR owner = $me OR claimed_at < now() - claim_timeout`. Returns the new fence, or `None` for
/// a refusal.
fn claim(instance: &mut Instance, owner: Owner) -> Option<u8> {
    if !may_claim(instance, &owner) {
        return None;
    }
    instance.owner = Some(owner);
    instance.fence += 1;
    instance.lapsed = false;
    Some(instance.fence)
}

fn may_claim(instance: &Instance, owner: &Owner) -> bool {
    instance.owner.is_none() || instance.owner == Some(*owner) || instance.lapsed
}

/// The commit's and the release's `WHERE owner = $me AND fence = $fence`: the claim the step
/// took is still the instance's.
fn is_current(instance: &Instance, owner: &Owner, fence: u8) -> bool {
    instance.owner == Some(*owner) && instance.fence == fence
}

impl Model for ProtocolModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let instance = Instance {
            owner: None,
            fence: 0,
            lapsed: false,
            version: 0,
            ended: false,
        };
        let row = |spec: &RowSpec| Row {
            state: match spec.asked_by {
                None => RowState::Due,
                Some(_) => RowState::Unasked,
            },
            refusals: 0,
            dispatches: 0,
        };
        let replica = |r: u8| Replica {
            up: true,
            incarnation: 0,
            looks: (self.setup.rows.iter().enumerate())
                .filter(|(_, spec)| spec.asker == r && spec.asked_by.is_none())
                .fold(0, |bits, (row, _)| bits | 1 << row),
            owes: 0,
            executors: vec![None; self.executors() as usize],
        };
        vec![State {
            instances: vec![instance; self.setup.instances as usize],
            rows: self.setup.rows.iter().map(row).collect(),
            replicas: (0..self.setup.replicas).map(replica).collect(),
            budget: Budget {
                crashes: self.setup.crashes,
                stalls: self.setup.stalls,
                failures: self.setup.failures,
                resumes: self.setup.resumes,
            },
            history: History::default(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        for replica in 0..self.setup.replicas {
            self.replica_actions(state, replica, actions);
        }
        self.world_actions(state, actions);
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Recover { replica } => self.recover(&mut state, replica),
            Action::Take { replica, lane, row } => self.take(&mut state, replica, lane, row),
            Action::Resume {
                replica,
                executor,
                instance,
            } => self.resume(&mut state, replica, executor, instance),
            Action::Commit { replica, executor } => self.commit(&mut state, replica, executor),
            Action::Release { replica, executor } => self.release(&mut state, replica, executor),
            Action::Crash { replica } => self.crash(&mut state, replica),
            Action::Restart { replica } => self.restart(&mut state, replica),
            Action::Stall { replica } => self.stall(&mut state, replica),
            Action::Lapse { instance } => state.instances[instance as usize].lapsed = true,
            Action::Sweep => Self::sweep(&mut state),
            Action::ComeDue { row } => state.rows[row as usize].state = RowState::Due,
            Action::Group { replica, group } => {
                one_transaction::commit_group(self, &mut state, replica, group);
            }
            Action::Poison { row } => one_transaction::poison(self, &mut state, row),
            Action::Ask { replica, row } => Self::ask_after_commit(&mut state, replica, row),
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        properties::all()
    }
}
