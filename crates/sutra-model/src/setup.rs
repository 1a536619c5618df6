//! What is checked: the protocol (Sutra's, or one plausible regression of it) and the bounds
//! that keep the state space finite.
//!
//! The bounds are what make the liveness properties honest: every fault the environment may
//! inject (a crash, a stall, a failed step, a refusal) is counted, so every path ends in a state
//! where nothing is left to do, and stateright checks `eventually` properties there.

/// Which protocol the model runs. `Sutra` is the two-phase durable claim, which the model's
/// administrative executors keep and the engine's administrative steps no longer take (each is a
/// group of one, the poisoning too), and `OneTransaction` decision 0024's lane step, which the
/// engine runs for every lane step since issue 11; every other variant is one plausible
/// regression of one of them, each of which the checker must catch.
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
    /// Decision 0024: a lane step is one transaction that claims (refusing at once), writes and
    /// releases, and a lane commits a group of them together, each member on its own claim
    /// predicate. Only administrative executors hold a durable claim (two-phase, as in `Sutra`).
    /// The dispatcher marks what it hands out, and a row dispatched too often without being
    /// taken poisons its instance.
    OneTransaction,
    /// `OneTransaction` whose group checks the claim predicate of its first member only (the
    /// lowest instance id, the order the rows are locked in) and writes every other member
    /// unchecked: a set-based write over the batch instead of over the rows the claim returned.
    GroupIgnoresMemberClaim,
    /// `OneTransaction` whose ending commit does not ask the rows another instance is owed (a
    /// child's `child_ended` for its parent, a parent's `cancel` for its children) in its own
    /// transaction: the committing replica asks them in a separate write after the commit, so a
    /// crash between the two loses the ask.
    AskAfterCommit,
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

    /// Lane steps are one transaction each, committed in groups (decision 0024).
    pub fn one_transaction_steps(self) -> bool {
        matches!(
            self,
            Protocol::OneTransaction | Protocol::GroupIgnoresMemberClaim | Protocol::AskAfterCommit
        )
    }

    /// Whether a group checks each member's claim predicate, or only its first member's.
    pub fn group_checks_every_member(self) -> bool {
        self != Protocol::GroupIgnoresMemberClaim
    }

    /// Whether the commit that ends an instance asks the rows it owes other instances in its own
    /// transaction, or leaves them to a separate write after it.
    pub fn asks_in_the_commit(self) -> bool {
        self != Protocol::AskAfterCommit
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

/// A delivery row: asked before any claim, or asked by the commit that ends another instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowSpec {
    pub instance: u8,
    /// The replica that asked it, and so knows of it in-process from the start (ignored for a
    /// row asked by an instance's end: the replica whose commit asks it knows of it).
    pub asker: u8,
    /// `None`: the row exists from the start. `Some(c)`: the row is not asked until instance `c`
    /// ends, and the commit that ends `c` asks it (a child's `child_ended` report for its
    /// parent's park; a parent's `cancel` for a live child).
    pub asked_by: Option<u8>,
    /// Whether the step that takes it ends its instance (which resolves its other rows).
    pub ends: bool,
    /// Whether its step kills the replica that runs it, every time (a poison pill): the row is
    /// never taken, only dispatched again, until the dispatcher poisons its instance.
    pub kills: bool,
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
    /// Dispatches of one row, without its being taken or deferred, after which the dispatcher
    /// poisons its instance (`sutra.instance.max-recoveries`; only `OneTransaction` counts them).
    pub max_dispatches: u8,
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
                    kills: false,
                    asked_by: None,
                },
                RowSpec {
                    instance: 0,
                    asker: 1,
                    ends: true,
                    kills: false,
                    asked_by: None,
                },
            ],
            crashes: 1,
            stalls: 1,
            failures: 1,
            resumes: 2,
            refusals: 1,
            max_dispatches: 2,
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
                    kills: false,
                    asked_by: None,
                },
                RowSpec {
                    instance: 1,
                    asker: 1,
                    ends: true,
                    kills: false,
                    asked_by: None,
                },
            ],
            resumes: 0,
            ..Setup::standard()
        }
    }

    /// `two_instances` with one row-less resume, a relay or an administrative step: a group can
    /// hold a member whose instance an administrative executor has claimed.
    pub fn two_instances_administered() -> Setup {
        Setup {
            resumes: 1,
            ..Setup::two_instances()
        }
    }

    /// One instance whose first row is a poison pill: each step that takes it kills its
    /// replica, so only the dispatcher's count can end it. Its second row ends the instance, so
    /// both endings are explored.
    pub fn poison_pill() -> Setup {
        let mut setup = Setup {
            resumes: 0,
            ..Setup::standard()
        };
        setup.rows[0].kills = true;
        setup
    }

    /// A call (issue 33): instance 0 is a parent parked on a call, instance 1 its child. Row 0
    /// ends the child (its last task's completion); the child's ending commit asks row 1 of the
    /// parent (`child_ended`), whose step ends the parent. Row 2 ends the parent first, if taken
    /// first (a deadline, a cancel); the parent's ending commit asks row 3 of the child (the
    /// cascading `cancel`), whose step ends the child. Whichever instance ends first, the row it
    /// asks of the other may find it ended: that row is stale, and is discarded. One crash, one
    /// stall, one failed step, no row-less resumes.
    pub fn call() -> Setup {
        let row = |instance, asker, asked_by| RowSpec {
            instance,
            asker,
            ends: true,
            kills: false,
            asked_by,
        };
        Setup {
            instances: 2,
            rows: vec![
                row(1, 0, None),
                row(0, 0, Some(1)),
                row(0, 1, None),
                row(1, 1, Some(0)),
            ],
            resumes: 0,
            ..Setup::standard()
        }
    }

    /// `call` without its cascade: the child's end asks the parent's `child_ended`, and nothing
    /// else ends the parent. Small enough to check the two-phase protocol too (`call` is not:
    /// millions of states), so that the asks of a two-phase `Commit` are checked as well as a
    /// group's.
    pub fn call_reported() -> Setup {
        let mut setup = Setup::call();
        setup.rows.truncate(2);
        setup
    }
}
