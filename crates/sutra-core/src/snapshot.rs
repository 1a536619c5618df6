//! The instance snapshot: everything the executor needs to take the next step, and nothing else.
//!
//! Snapshots are persisted as JSON and read back by later versions of Sutra, so their shape is a
//! compatibility contract: fields may be added (with `#[serde(default)]`), never renamed or
//! re-typed. `format` names the shape; a reader refuses a format newer than it knows instead of
//! guessing (see `docs/decisions/0004-snapshot-format.md`).

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The snapshot shape this build writes.
pub const SNAPSHOT_FORMAT: u32 = 1;

/// Which instance this is: fixed when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// A UUIDv7, chosen by the caller (the core has no clock and no randomness).
    pub id: String,
    pub tenant: String,
    pub deployment: String,
    pub version: u32,
    pub flow: String,
    /// The instance that called this one and waits for it to end; `None` for an instance a
    /// message started (and in every snapshot written before calls).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<Caller>,
}

/// Whom a called instance (a child) answers when it ends: its parent's park that waits for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    pub instance: String,
    pub park: ParkId,
    /// The parent's node that called.
    pub node: String,
    /// Calls between the root instance and this one: 1 for a child of a root.
    pub depth: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Not started yet: the snapshot [`Snapshot::new`] makes, before the `Start` event.
    Created,
    /// Parked: every token waits on something outside the step.
    Suspended,
    Completed,
    Cancelled,
    /// Durable and restorable (SPEC §7.2); not terminal.
    Failed,
}

impl Status {
    /// `completed` and `cancelled`: nothing can ever happen to the instance again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Cancelled)
    }

    /// The status [`Status::as_str`] names.
    pub fn parse(text: &str) -> Option<Status> {
        [
            Status::Created,
            Status::Suspended,
            Status::Completed,
            Status::Cancelled,
            Status::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Created => "created",
            Status::Suspended => "suspended",
            Status::Completed => "completed",
            Status::Cancelled => "cancelled",
            Status::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Snapshot {
    pub format: u32,
    pub instance: InstanceInfo,
    pub status: Status,
    pub vars: Map<String, Value>,
    /// Live tokens, in id order.
    pub tokens: Vec<Token>,
    /// The last audit sequence number written. History starts at 1 and has no gaps.
    pub audit_seq: u64,
    pub next_token: u64,
    pub next_park: u64,
    pub failure: Option<Failure>,
    /// The `end` node's reply, once the instance completed: what a caller held by
    /// `ack: complete` is answered with, kept so that a replica other than the one whose step
    /// completed the instance answers it alike (decision 0024). Absent until then, and in
    /// snapshots written before it was kept: `null`, as an `end` without a reply gives.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub reply: Value,
    /// The completions of nodes that declared `compensate-with`, oldest first: what a
    /// `compensate` node undoes. Absent until a node that can be compensated completes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compensations: Vec<Completion>,
}

/// One completion of a node that declared `compensate-with`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub node: String,
    /// The scopes it completed inside, innermost first: `compensate: { scope }` undoes the
    /// completions inside that scope only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub within: Vec<String>,
    /// Whether its handler has completed: a restore of a compensation that failed part way
    /// does not run it again.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub compensated: bool,
}

impl Snapshot {
    /// The snapshot of an instance that has not started yet.
    pub fn new(instance: InstanceInfo) -> Snapshot {
        Snapshot {
            format: SNAPSHOT_FORMAT,
            instance,
            status: Status::Created,
            vars: Map::new(),
            tokens: Vec::new(),
            audit_seq: 0,
            next_token: 1,
            next_park: 1,
            failure: None,
            reply: Value::Null,
            compensations: Vec::new(),
        }
    }

    /// Reads a persisted snapshot, refusing a format this build does not know.
    pub fn from_json(value: Value) -> Result<Snapshot, SnapshotError> {
        let format = value
            .get("format")
            .and_then(Value::as_u64)
            .ok_or(SnapshotError::NoFormat)?;
        if format > u64::from(SNAPSHOT_FORMAT) {
            return Err(SnapshotError::TooNew(format));
        }
        serde_json::from_value(value).map_err(|e| SnapshotError::Malformed(e.to_string()))
    }

    pub fn to_json(&self) -> Value {
        serde_json::to_value(self).expect("a snapshot is always representable as JSON")
    }

    pub fn token(&self, id: TokenId) -> Option<&Token> {
        self.tokens.iter().find(|token| token.id == id)
    }

    /// The token parked on `park`, if any.
    pub fn token_parked_on(&self, park: ParkId) -> Option<&Token> {
        self.tokens
            .iter()
            .find(|token| token.park().is_some_and(|p| p.id == park))
    }

    /// Every park the instance currently holds.
    pub fn parks(&self) -> impl Iterator<Item = &Park> {
        self.tokens.iter().filter_map(Token::park)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("the snapshot has no `format` field")]
    NoFormat,
    #[error(
        "the snapshot has format {0}, newer than this build of Sutra reads ({SNAPSHOT_FORMAT}); upgrade Sutra"
    )]
    TooNew(u64),
    #[error("the snapshot is malformed: {0}")]
    Malformed(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TokenId(pub u64);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ParkId(pub u64);

impl std::fmt::Display for ParkId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A position in the graph.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    pub id: TokenId,
    /// The id of the node the token is at.
    pub node: String,
    /// The token that forked this one (a `parallel` node's token), or the token a satellite
    /// serves (a race arm's race, a reminder's waiting node); `None` for the root token.
    pub parent: Option<TokenId>,
    pub state: TokenState,
    /// What the token is for when it is not an ordinary position in the graph. Absent in
    /// snapshots written before races and reminders: every token of those is ordinary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
}

/// The part a token plays besides being at its node (decision 0050). A token holds at most one
/// park, so an extra wait of a node — a race's arms, a reminder's timer — is a satellite token
/// of its own, parked beside the token it serves (`parent`) at the same node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "role")]
pub enum Role {
    /// Arm `index` of the race its parent waits at.
    Arm { index: u32 },
    /// The timer of the `remind` of the node its parent waits at; `fired` reminders so far.
    Reminder { fired: u32 },
    /// A token running a reminder's list: it ends at the end of the list without joining
    /// anything or completing the instance.
    Detached,
    /// The body for item `index` of the `for-each` its parent loops at.
    Body { index: u32 },
    /// The timer of the `deadline` of the `for-each` its parent loops at (a looping token holds
    /// no park for the deadline to be the timer of).
    Deadline,
    /// Running the handler of completion `entry` (an index into `Snapshot::compensations`) for
    /// the `compensate` node its parent waits at.
    Compensation { entry: u32 },
}

impl Token {
    pub fn park(&self) -> Option<&Park> {
        match &self.state {
            TokenState::Parked(park) => Some(park),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum TokenState {
    /// Runnable. Seen at rest only on the token a failure stopped.
    Ready,
    Parked(Park),
    /// At a `parallel` node, waiting for `pending` branch tokens to end.
    Joining {
        pending: u32,
    },
    /// At a `race` node, waiting for the first of its arms (satellite tokens) to fire.
    Racing,
    /// At a `for-each` node: `items` from the list, `results` in item order (null until its body
    /// ends), bodies started up to `next` (in item order), `running` of them not ended yet.
    Looping {
        items: Vec<Value>,
        results: Vec<Value>,
        next: u32,
        running: u32,
    },
    /// At a `compensate` node: `pending` completions whose handlers are still to run, next
    /// first; the one running is a token of its own (`Role::Compensation`).
    Compensating {
        pending: Vec<u32>,
    },
}

/// What a parked token waits on. The store keeps one durable row (a wait, a timer, a task) per
/// park, keyed by `(instance, park id)`; a delivery names the park it answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Park {
    pub id: ParkId,
    #[serde(flatten)]
    pub kind: ParkKind,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ParkKind {
    /// Waits for a message on `channel` whose correlation key is `key`; times out at `due`.
    Receive {
        channel: String,
        key: String,
        due: Option<Timestamp>,
    },
    /// A durable timer.
    Wait { due: Timestamp },
    /// An external task for pull workers; withdrawn at `due` when its node has a deadline.
    Task {
        topic: String,
        input: Value,
        retries: u32,
        #[serde(with = "iso_duration")]
        backoff: SignedDuration,
        #[serde(with = "iso_duration")]
        lock: SignedDuration,
        /// The node's deadline. Absent in snapshots written before deadlines: no timer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due: Option<Timestamp>,
    },
    /// Waits for the called instance `child`, an instance of `flow`, to end.
    Call {
        flow: String,
        child: String,
        /// The node's deadline, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due: Option<Timestamp>,
        /// Set when the child failed and the node has no `on-error`: the park keeps waiting for
        /// the child to be restored and to end again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        failed: Option<ChildFailure>,
    },
}

/// Why a called instance failed, as its parent keeps it while it waits for a repair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChildFailure {
    pub code: String,
    pub detail: String,
}

/// Which of the kinds of [`ParkKind`] a park is, without its details: what a disarm must know
/// of the rows behind it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParkSort {
    Receive,
    Wait,
    Task,
    /// A wait for a called flow's instance (a child) to end. Disarming it cancels that child:
    /// the store asks a `cancel` of every live child the park waits for, so a parent leaving its
    /// node — cancelled, failed, or past a deadline — leaves no orphan running.
    Call,
}

impl ParkKind {
    pub fn sort(&self) -> ParkSort {
        match self {
            ParkKind::Receive { .. } => ParkSort::Receive,
            ParkKind::Wait { .. } => ParkSort::Wait,
            ParkKind::Task { .. } => ParkSort::Task,
            ParkKind::Call { .. } => ParkSort::Call,
        }
    }

    /// When the store must fire a timer for this park, if ever.
    pub fn due(&self) -> Option<Timestamp> {
        match self {
            ParkKind::Receive { due, .. } => *due,
            ParkKind::Wait { due } => Some(*due),
            ParkKind::Task { due, .. } => *due,
            ParkKind::Call { due, .. } => *due,
        }
    }
}

/// A fatal failure, stamped on the snapshot in place (SPEC §7.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: String,
    pub detail: String,
    /// The token whose node failed; restore runs that node again. `None` when no single token
    /// failed (a poisoned step).
    pub token: Option<TokenId>,
    pub node: Option<String>,
}

/// Durations are written as ISO-8601 strings (`PT5S`), as everywhere else in Sutra's JSON.
mod iso_duration {
    use jiff::SignedDuration;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &SignedDuration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(d)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SignedDuration, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
