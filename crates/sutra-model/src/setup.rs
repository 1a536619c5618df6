//! What is checked: the protocol (Sutra's, or one plausible regression of it) and the bounds
//! that keep the state space finite.
//!
//! The bounds are what make the liveness properties honest: every fault the environment may
//! inject (a crash, a stall, a failed step, a refusal) is counted, so every path ends in a state
//! where nothing is left to do, and stateright checks `eventually` properties there.

/// Which protocol the model runs. `Sutra` is the engine as built; every other variant is one
/// plausible regression of it, each of which the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// The engine: lane-scoped owners, a commit conditional on owner and fence, look-again by a
    /// durable deferral, passes over every due row at start, on every poll and after every sweep,
    /// and one administrative step at a time per replica.
    Sutra,
    /// One owner id per process (`{replica}`) instead of per lane: the claim re-enters across
    /// lanes of one replica.
    PerProcessOwner,
    /// A refused claimant schedules no next attempt: it parks the row until the holder hands the
    /// instance over as it commits or releases (the design seed 004 replaced).
    NoLookAgain,
    /// No pass over the table: not at start (`recover`), not on the poll, not after a sweep. A
    /// dispatcher looks only at rows it learnt of in its own process.
    NoRecover,
    /// The commit's update is conditioned on neither the fence nor the owner: the claim is checked
    /// when taken and never again.
    UnfencedCommit,
    /// Administrative operations of one replica run concurrently under its one `{replica}/admin`
    /// owner (the engine before this model's check: nothing serialized them).
    SharedAdminOwner,
}

impl Protocol {
    pub fn owner_per_lane(self) -> bool {
        self != Protocol::PerProcessOwner
    }

    pub fn looks_again(self) -> bool {
        self != Protocol::NoLookAgain
    }

    pub fn passes_over_the_table(self) -> bool {
        self != Protocol::NoRecover
    }

    pub fn commit_checks_the_claim(self) -> bool {
        self != Protocol::UnfencedCommit
    }

    /// How many administrative steps one replica may run at once.
    pub fn admin_executors(self) -> u8 {
        if self == Protocol::SharedAdminOwner {
            2
        } else {
            1
        }
    }
}

/// A delivery row that exists from the start: asked before any claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowSpec {
    pub instance: u8,
    /// The replica that asked it, and so knows of it in-process from the start.
    pub asker: u8,
    /// Whether the step that takes it ends its instance (which resolves its other rows).
    pub ends: bool,
}

/// The size of the world and the environment's fault budget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Setup {
    pub replicas: u8,
    pub lanes: u8,
    pub instances: u8,
    pub rows: Vec<RowSpec>,
    /// Process crashes, across all replicas.
    pub crashes: u8,
    /// Process stalls (SIGSTOP long enough for the process's claims to lapse).
    pub stalls: u8,
    /// Steps that exit without committing (an error, a panic) though their delivery was fresh.
    pub failures: u8,
    /// Resumes that carry no row: relays on a lane, administrative operations on the admin
    /// executor.
    pub resumes: u8,
    /// Refusals one row may meet; further attempts wait until the claim is free.
    pub refusals: u8,
}

impl Setup {
    /// The setup every protocol is checked in: two replicas of two lanes, one instance with two
    /// rows (the second ends it), and one of every fault.
    pub fn standard() -> Setup {
        Setup {
            replicas: 2,
            lanes: 2,
            instances: 1,
            rows: vec![
                RowSpec {
                    instance: 0,
                    asker: 0,
                    ends: false,
                },
                RowSpec {
                    instance: 0,
                    asker: 1,
                    ends: true,
                },
            ],
            crashes: 1,
            stalls: 1,
            failures: 1,
            resumes: 2,
            refusals: 1,
        }
    }

    /// Two instances of one row each, so that lanes, stalls and crashes span instances: a lane
    /// busy on one cannot take the other, and a stall lapses the claims on both.
    pub fn two_instances() -> Setup {
        Setup {
            instances: 2,
            rows: vec![
                RowSpec {
                    instance: 0,
                    asker: 0,
                    ends: false,
                },
                RowSpec {
                    instance: 1,
                    asker: 1,
                    ends: true,
                },
            ],
            resumes: 0,
            ..Setup::standard()
        }
    }
}
