//! The model's state: what the database holds (instances and their claims, delivery rows), what
//! each replica holds in memory (its dispatcher's looks, its executors' steps), the environment's
//! remaining fault budget, and the few history flags the safety properties read.
//!
//! Time is not a clock here. A claim is either fresh or lapsed (older than the claim timeout),
//! and a deferred row is either waiting or due; actions move them from one to the other.

/// Who holds a claim: the store compares it for equality and never parses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub replica: u8,
    /// Which life of the replica: the default replica id carries a random suffix per process,
    /// so a restarted replica never re-enters its previous incarnation's claims.
    pub incarnation: u8,
    pub slot: Slot,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// `{replica}/lane-{i}`.
    Lane(u8),
    /// `{replica}`: one owner for every lane (a broken variant).
    Process,
    /// `{replica}/admin`.
    Admin,
}

/// An instance's row in `instances`: its claim and, for the properties, how often it committed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Instance {
    pub owner: Option<Owner>,
    pub fence: u8,
    /// The claim is older than the claim timeout: anyone may take it, and the sweep clears it.
    pub lapsed: bool,
    /// Commits so far: a step that read version v and lands on another lost someone's commit.
    pub version: u8,
    pub ended: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowState {
    /// Not asked yet: the row waits for the commit that ends the instance named by its spec's
    /// `asked_by` (not in the table, so not pending).
    Unasked,
    /// Asked and due: a pass over the table sees it.
    Due,
    /// Handed out by a dispatcher that marked it due again one claim timeout later (only in
    /// `OneTransaction`): another pass sees it once the mark expires.
    Marked,
    /// A refused or failed attempt pushed its due time on (look-again).
    Deferred,
    /// Waiting for the holder to hand the instance over (only in `NoLookAgain`).
    Parked,
    /// Deleted by the commit of the step that consumed it.
    Taken,
    /// Deleted because its instance ended, or discarded as stale: asked of an instance that had
    /// ended.
    Resolved,
}

impl RowState {
    /// Still in the table.
    pub fn pending(self) -> bool {
        matches!(
            self,
            RowState::Due | RowState::Marked | RowState::Deferred | RowState::Parked
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Row {
    pub state: RowState,
    /// Claimants refused so far (the `attempts` column).
    pub refusals: u8,
    /// Dispatches since it was last deferred, none of which took it (the `dispatches` column of
    /// decision 0024; always 0 in the two-phase protocol, which does not count them).
    pub dispatches: u8,
}

/// A step in flight on one executor (a lane, or the admin executor): claimed, not yet over.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    pub instance: u8,
    /// The delivery it consumes; `None` for a relay or an administrative operation.
    pub row: Option<u8>,
    pub fence: u8,
    /// The instance's version when the claim was taken (what the step rehydrated).
    pub read: u8,
    /// The holder stalled long enough for this claim to lapse.
    pub lapsed: bool,
    /// Its delivery was already consumed, or its instance had ended: it can only release.
    pub stale: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Replica {
    pub up: bool,
    pub incarnation: u8,
    /// Rows this replica's dispatcher will hand to a lane once they are due (a bit per row).
    pub looks: u8,
    /// Rows whose ask this replica's commit left to a separate write after it (a bit per row;
    /// only in `AskAfterCommit`): lost if the process dies first.
    pub owes: u8,
    /// Lanes first, then the admin executor(s).
    pub executors: Vec<Option<Step>>,
}

impl Replica {
    pub fn looks_at(&self, row: u8) -> bool {
        self.looks & (1 << row) != 0
    }

    /// Whether one of this replica's executors is stepping with `row`.
    pub fn in_flight(&self, row: u8) -> bool {
        self.steps().any(|step| step.row == Some(row))
    }

    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.executors.iter().flatten()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Budget {
    pub crashes: u8,
    pub stalls: u8,
    pub failures: u8,
    pub resumes: u8,
}

/// Set by a commit that should never have landed; the safety properties read them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct History {
    /// A commit landed from a fence other than the instance's current one.
    pub stale_fence_commit: bool,
    /// A commit landed on a version other than the one its step read.
    pub lost_commit: bool,
    /// A one-transaction step wrote an instance while another step in flight held a claim on it
    /// that had not lapsed.
    pub wrote_under_a_live_claim: bool,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub instances: Vec<Instance>,
    pub rows: Vec<Row>,
    pub replicas: Vec<Replica>,
    pub budget: Budget,
    pub history: History,
}
