//! Leases (SPEC §6, decision 0018): which replica leads a singleton role — `timers`,
//! `instance-sweeper`, `history-purger`, … — and so runs its work. A model of its own, beside the
//! claim protocol's rather than inside it (decision 0041): the claim protocol's safety does not
//! rest on leases, and its clockless state space would not survive a clock.
//!
//! The rule checked is the engine's (`sutra-engine/src/leadership.rs`): a term ends on a *local*
//! deadline, counted on the replica's own clock from when its acquire was *sent*, a fifth of the
//! TTL short of the lease's expiry; and another replica can acquire the lease only once it has
//! expired by the database's clock. Between the two, the replica's clock may run slow against
//! the database's, by a bounded drift.
//!
//! Time is discrete. A tick is one unit of the database's clock (the reference: only the drift
//! between the two clocks matters), and every clock reading is counted down relative to now, so
//! that the state graph is finite without a horizon: a replica may renew for ever. A replica's
//! clock advances with the database's, or falls a tick behind it; over one term — from the send
//! of the acquire that started it — it falls at most `LeaseSetup::drift` ticks behind. A clock
//! that runs fast only ends a term sooner, so it is not modelled.

use stateright::{Model, Property};

/// Which rule a replica's term follows. `Sutra` is the engine's; every other variant is one
/// plausible regression of it, which the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseProtocol {
    /// Four fifths of the TTL, counted from when the acquire was sent (`local_term`, `contend`).
    Sutra,
    /// The whole TTL, counted from the send: no room for the replica's clock to run slow.
    TermEndsAtTheTtl,
    /// Four fifths of the TTL, counted from when the answer came back: the time the acquire
    /// spent on its way to the database and back is not held back.
    TermCountedFromTheReply,
}

impl LeaseProtocol {
    /// How many ticks of its own clock a replica may act on a lease after the reference moment
    /// (the send, or the reply). `leadership.rs`: `local_term`, `ttl - ttl / 5`.
    pub fn local_term(self, ttl: u8) -> u8 {
        match self {
            LeaseProtocol::TermEndsAtTheTtl => ttl,
            LeaseProtocol::Sutra | LeaseProtocol::TermCountedFromTheReply => ttl - ttl / 5,
        }
    }

    /// Whether the term is counted from the send of the acquire (`asked` in `contend`).
    pub fn counts_from_the_send(self) -> bool {
        self != LeaseProtocol::TermCountedFromTheReply
    }
}

/// The size of the world: one role, its contenders, the clocks and the environment's budget.
///
/// One role is enough: each role has its own lease row and its own poll task, and roles share
/// nothing but the clocks.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseSetup {
    pub replicas: u8,
    /// `sutra.lease.ttl`, in ticks of the database's clock.
    pub ttl: u8,
    /// How many ticks a replica's clock may fall behind the database's over one term.
    pub drift: u8,
    /// Process crashes, across all replicas.
    pub crashes: u8,
    /// Shutdowns that resign (stop the role's work, then release the lease), across all replicas.
    pub resignations: u8,
    /// The highest epoch the lease may reach: it bounds the handovers from one holder to another
    /// (renewals are not bounded).
    pub epochs: u8,
}

impl LeaseSetup {
    /// Two replicas contending for one role, a TTL of five ticks (so a term of four), a clock
    /// that may fall one tick behind per term — a fifth of the TTL, the most the engine's margin
    /// allows for — one crash, one resignation, and three holders in turn.
    pub fn standard() -> LeaseSetup {
        LeaseSetup {
            replicas: 2,
            ttl: 5,
            drift: 1,
            crashes: 1,
            resignations: 1,
            epochs: 3,
        }
    }

    /// `standard` with clocks that never drift.
    pub fn exact_clocks() -> LeaseSetup {
        LeaseSetup {
            drift: 0,
            ..LeaseSetup::standard()
        }
    }

    /// `standard` with a clock that may fall two ticks behind per term: more than the fifth the
    /// engine holds back.
    pub fn drift_past_the_margin() -> LeaseSetup {
        LeaseSetup {
            drift: 2,
            ..LeaseSetup::standard()
        }
    }
}

/// A lease holder: a replica id, unique per process (decision 0008), so a restarted replica
/// cannot renew its predecessor's lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Holder {
    pub replica: u8,
    pub incarnation: u8,
}

/// The role's row in `leases`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseRow {
    /// `None` before the first acquire inserts the row.
    pub holder: Option<Holder>,
    /// Ticks of the database's clock until `expires_at`; 0: expired (`expires_at <= now()`).
    pub expires_in: u8,
    /// Grows by one whenever the holder changes, and never otherwise.
    pub epoch: u8,
}

/// A stretch of leading the role (`leadership.rs`: `Term`). Only a current term is kept: one
/// whose deadline has passed is dropped, as `while_leading` drops the role's work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Term {
    pub epoch: u8,
    /// Ticks of the replica's own clock until the local deadline; always at least one.
    pub left: u8,
    /// Ticks the replica's clock has fallen behind the database's since the term's reference
    /// moment (the send of its acquire).
    pub lag: u8,
}

/// The database's answer to an acquire, once it has run it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Answer {
    /// The lease is the asker's, at this epoch.
    Granted(u8),
    /// Another holder's lease had not expired: no row returned.
    Refused,
}

/// An acquire the poll task has sent and not yet heard back from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ask {
    /// Ticks of the replica's own clock since it was sent, up to the local term (an answer that
    /// late starts nothing); not counted where terms are counted from the reply.
    pub since: u8,
    /// Ticks the replica's clock has fallen behind the database's since it was sent.
    pub lag: u8,
    /// `None` until the database has run it.
    pub answer: Option<Answer>,
}

/// One replica's contention for the role: its poll task and the role's work.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Contender {
    pub up: bool,
    pub incarnation: u8,
    pub term: Option<Term>,
    /// The poll task sends one acquire at a time.
    pub asking: Option<Ask>,
}

impl Contender {
    /// Whether it believes it leads the role and can act: its role work runs exactly while its
    /// term is current by its own clock (`while_leading` looks for the deadline before it polls
    /// the work again).
    pub fn leads(&self) -> bool {
        self.up && self.term.is_some()
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LeaseState {
    pub lease: LeaseRow,
    pub replicas: Vec<Contender>,
    /// What is left of the environment's budget.
    pub crashes: u8,
    pub resignations: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LeaseAction {
    /// The database's clock advances a tick, and so does every replica's clock but those in
    /// `behind` (a bit per replica), which fall a tick behind it.
    Tick { behind: u8 },
    /// The poll task sends an acquire (or a renewal: it is the same statement). The engine sends
    /// one every `lease.poll`; the model lets it send at any time, or never.
    Ask { replica: u8 },
    /// The database runs the acquire's upsert, at any time after it was sent.
    Acquire { replica: u8 },
    /// The answer reaches the poll task, which starts, extends or ends the term (`record`).
    Hear { replica: u8 },
    /// The acquire fails — the database is out of reach, the connection drops — before or after
    /// the database ran it: the term in hand still ends at its deadline.
    Lose { replica: u8 },
    /// The process dies, and with it its term and its poll task; its lease stays.
    Crash { replica: u8 },
    /// The process starts again, under a new replica id.
    Restart { replica: u8 },
    /// The process shuts down: it stops the role's work, then releases the lease (`resign`).
    Resign { replica: u8 },
}

pub const ONE_LEADER_PER_ROLE: &str = "OneLeaderPerRole";
pub const LEADERSHIP_PASSES: &str = "LeadershipPasses";

#[derive(Clone, Debug)]
pub struct LeaseModel {
    pub protocol: LeaseProtocol,
    pub setup: LeaseSetup,
}

impl LeaseModel {
    pub fn new(protocol: LeaseProtocol, setup: LeaseSetup) -> LeaseModel {
        LeaseModel { protocol, setup }
    }

    pub fn local_term(&self) -> u8 {
        self.protocol.local_term(self.setup.ttl)
    }

    fn holder(state: &LeaseState, replica: u8) -> Holder {
        Holder {
            replica,
            incarnation: state.replicas[replica as usize].incarnation,
        }
    }

    /// Whether the drift since this acquire was sent still counts against a deadline: while its
    /// answer could still start a term counted from the send.
    fn counted(&self, ask: &Ask) -> bool {
        self.protocol.counts_from_the_send() && ask.since < self.local_term()
    }

    /// Whether the replica's clock may fall one more tick behind: it must stay within the
    /// drift over every stretch still counted against a deadline — its term's, and its pending
    /// acquire's. A replica counting nothing has nothing a lagging clock would change.
    fn may_fall_behind(&self, contender: &Contender) -> bool {
        let term = contender.term.map(|term| term.lag);
        let ask = (contender.asking)
            .filter(|ask| self.counted(ask))
            .map(|ask| ask.lag);
        let within = |lag: Option<u8>| lag.is_none_or(|lag| lag < self.setup.drift);
        contender.up && (term.is_some() || ask.is_some()) && within(term) && within(ask)
    }

    fn tick(&self, state: &mut LeaseState, behind: u8) {
        state.lease.expires_in = state.lease.expires_in.saturating_sub(1);
        for (replica, contender) in state.replicas.iter_mut().enumerate() {
            if behind & 1 << replica != 0 {
                self.fall_behind(contender);
            } else {
                self.advance(contender);
            }
        }
    }

    /// The replica's clock stands still while the database's advances.
    fn fall_behind(&self, contender: &mut Contender) {
        if let Some(term) = &mut contender.term {
            term.lag += 1;
        }
        if let Some(ask) = contender.asking.as_mut().filter(|ask| self.counted(ask)) {
            ask.lag += 1;
        }
    }

    /// The replica's clock advances a tick: its term nears its deadline, and ends there; its
    /// pending acquire ages, until an answer to it could start no term.
    fn advance(&self, contender: &mut Contender) {
        if let Some(term) = &mut contender.term {
            term.left -= 1;
            if term.left == 0 {
                contender.term = None;
            }
        }
        if let Some(ask) = contender.asking.as_mut().filter(|ask| self.counted(ask)) {
            ask.since += 1;
            if !self.counted(ask) {
                ask.lag = 0;
            }
        }
    }

    fn ask(state: &mut LeaseState, replica: u8) {
        state.replicas[replica as usize].asking = Some(Ask {
            since: 0,
            lag: 0,
            answer: None,
        });
    }

    /// Whether the acquire may run within the setup's bound on handovers.
    fn may_acquire(&self, state: &LeaseState, replica: u8) -> bool {
        let me = Self::holder(state, replica);
        let lease = &state.lease;
        !may_take(lease, me) || next_epoch(lease, me) <= self.setup.epochs
    }

    fn acquire(&self, state: &mut LeaseState, replica: u8) {
        let me = Self::holder(state, replica);
        let answer = upsert(&mut state.lease, me, self.setup.ttl);
        let ask = state.replicas[replica as usize].asking.as_mut();
        ask.expect("only a sent acquire runs").answer = Some(answer);
    }

    /// `record`: a grant starts or extends the term, up to the local deadline counted from the
    /// reference moment; a grant heard at or past that deadline starts nothing; a refusal ends
    /// the term.
    fn hear(&self, state: &mut LeaseState, replica: u8) {
        let contender = &mut state.replicas[replica as usize];
        let ask = contender
            .asking
            .take()
            .expect("only a sent acquire is heard");
        contender.term = match ask.answer.expect("only an answer is heard") {
            Answer::Refused => None,
            Answer::Granted(epoch) => self.term(epoch, &ask),
        };
    }

    fn term(&self, epoch: u8, ask: &Ask) -> Option<Term> {
        let (spent, lag) = if self.protocol.counts_from_the_send() {
            (ask.since, ask.lag)
        } else {
            (0, 0)
        };
        let left = self.local_term().saturating_sub(spent);
        (left > 0).then_some(Term { epoch, left, lag })
    }

    fn crash(state: &mut LeaseState, replica: u8) {
        state.crashes -= 1;
        Self::stop(state, replica);
    }

    /// The role's work stops (its term is gone) and so does the poll task; an acquire in flight
    /// may already have run.
    fn stop(state: &mut LeaseState, replica: u8) {
        let contender = &mut state.replicas[replica as usize];
        contender.up = false;
        contender.term = None;
        contender.asking = None;
    }

    fn restart(state: &mut LeaseState, replica: u8) {
        let contender = &mut state.replicas[replica as usize];
        contender.up = true;
        contender.incarnation += 1;
    }

    /// `RoleLoops::resign`: the role's work stops first, then the lease is released, so that no
    /// work outlives the lease it ran under.
    fn resign(state: &mut LeaseState, replica: u8) {
        state.resignations -= 1;
        let me = Self::holder(state, replica);
        Self::stop(state, replica);
        release(&mut state.lease, me);
    }

    fn replica_actions(&self, state: &LeaseState, replica: u8, actions: &mut Vec<LeaseAction>) {
        let contender = &state.replicas[replica as usize];
        if !contender.up {
            actions.push(LeaseAction::Restart { replica });
            return;
        }
        match contender.asking {
            None => actions.push(LeaseAction::Ask { replica }),
            Some(ask) => {
                if ask.answer.is_none() && self.may_acquire(state, replica) {
                    actions.push(LeaseAction::Acquire { replica });
                }
                if ask.answer.is_some() {
                    actions.push(LeaseAction::Hear { replica });
                }
                actions.push(LeaseAction::Lose { replica });
            }
        }
        if state.crashes > 0 {
            actions.push(LeaseAction::Crash { replica });
        }
        if state.resignations > 0 {
            actions.push(LeaseAction::Resign { replica });
        }
    }

    /// Every combination of clocks falling behind that the drift allows.
    fn ticks(&self, state: &LeaseState, actions: &mut Vec<LeaseAction>) {
        let laggards = (state.replicas.iter().enumerate())
            .filter(|(_, contender)| self.may_fall_behind(contender))
            .fold(0u8, |bits, (replica, _)| bits | 1 << replica);
        let subsets = (0..=laggards).filter(|behind| behind & !laggards == 0);
        actions.extend(subsets.map(|behind| LeaseAction::Tick { behind }));
    }
}

/// The acquire's `WHERE` (`leases.rs`): the lease is free, already the holder's (a renewal), or
/// expired by the database's clock (`expires_at <= sutra_now()`).
fn may_take(lease: &LeaseRow, me: Holder) -> bool {
    lease.holder.is_none_or(|holder| holder == me) || lease.expires_in == 0
}

/// `epoch + CASE WHEN holder = EXCLUDED.holder THEN 0 ELSE 1 END`; the first insert's epoch is 1.
fn next_epoch(lease: &LeaseRow, me: Holder) -> u8 {
    if lease.holder == Some(me) {
        lease.epoch
    } else {
        lease.epoch + 1
    }
}

/// The acquire's upsert: `INSERT … ON CONFLICT (role) DO UPDATE SET epoch = …, holder = $me,
/// expires_at = sutra_after(ttl) WHERE … RETURNING …`. The expiry is stamped when the database
/// runs the statement, which is after it was sent.
fn upsert(lease: &mut LeaseRow, me: Holder, ttl: u8) -> Answer {
    if !may_take(lease, me) {
        return Answer::Refused;
    }
    lease.epoch = next_epoch(lease, me);
    lease.holder = Some(me);
    lease.expires_in = ttl;
    Answer::Granted(lease.epoch)
}

/// The release: `UPDATE leases SET expires_at = LEAST(expires_at, sutra_now()) WHERE role = $1
/// AND holder = $me`. The row, and so its epoch, stays.
fn release(lease: &mut LeaseRow, me: Holder) {
    if lease.holder == Some(me) {
        lease.expires_in = 0;
    }
}

impl Model for LeaseModel {
    type State = LeaseState;
    type Action = LeaseAction;

    fn init_states(&self) -> Vec<LeaseState> {
        let contender = Contender {
            up: true,
            incarnation: 0,
            term: None,
            asking: None,
        };
        vec![LeaseState {
            lease: LeaseRow {
                holder: None,
                expires_in: 0,
                epoch: 0,
            },
            replicas: vec![contender; self.setup.replicas as usize],
            crashes: self.setup.crashes,
            resignations: self.setup.resignations,
        }]
    }

    /// Ticks first, and the fewest clocks falling behind first: of the equally short
    /// counterexamples the checker reports the last it meets (`check::deepen`), and this order
    /// makes it one in which only the clock that matters falls behind.
    fn actions(&self, state: &LeaseState, actions: &mut Vec<LeaseAction>) {
        self.ticks(state, actions);
        for replica in 0..self.setup.replicas {
            self.replica_actions(state, replica, actions);
        }
    }

    fn next_state(&self, last: &LeaseState, action: LeaseAction) -> Option<LeaseState> {
        let mut state = last.clone();
        match action {
            LeaseAction::Tick { behind } => self.tick(&mut state, behind),
            LeaseAction::Ask { replica } => Self::ask(&mut state, replica),
            LeaseAction::Acquire { replica } => self.acquire(&mut state, replica),
            LeaseAction::Hear { replica } => self.hear(&mut state, replica),
            LeaseAction::Lose { replica } => state.replicas[replica as usize].asking = None,
            LeaseAction::Crash { replica } => Self::crash(&mut state, replica),
            LeaseAction::Restart { replica } => Self::restart(&mut state, replica),
            LeaseAction::Resign { replica } => Self::resign(&mut state, replica),
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(ONE_LEADER_PER_ROLE, one_leader_per_role),
            Property::sometimes(LEADERSHIP_PASSES, leadership_passes),
        ]
    }
}

/// No two replicas believe they lead the role, and can act on it, at once.
fn one_leader_per_role(_: &LeaseModel, state: &LeaseState) -> bool {
    state.replicas.iter().filter(|c| c.leads()).count() <= 1
}

/// Somewhere, a replica leads the role at an epoch after the first: the lease passed from one
/// holder to another. Its example shows the check explores handovers, so that
/// `OneLeaderPerRole` does not hold merely because no second replica ever leads.
fn leadership_passes(_: &LeaseModel, state: &LeaseState) -> bool {
    (state.replicas.iter()).any(|c| c.leads() && c.term.is_some_and(|term| term.epoch > 1))
}
