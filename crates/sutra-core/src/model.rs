//! The validated flow model: what a deployment document means once the checker has accepted it.
//!
//! Every reference in the model is resolved: a jump is a [`NodeIndex`], a channel name is known to
//! exist, every expression has compiled. The executor therefore never meets a dangling name; the
//! only failures left for run time are those that depend on data (an expression that errors on the
//! instance's variables, a choice with no match).

use std::collections::{BTreeMap, HashMap};

use jiff::SignedDuration;

use crate::expr::{Expr, Template};

/// One deployment document: a name, its channels and its flows.
#[derive(Debug, Clone)]
pub struct Deployment {
    pub name: String,
    /// The tenant the document names, if it names one; a deployment belongs to the tenant that
    /// deploys it, which must be this one when it is named.
    pub tenant: Option<String>,
    pub channels: BTreeMap<String, Channel>,
    pub flows: BTreeMap<String, Flow>,
}

impl Channel {
    /// The routing key an AMQP `emit` publishes with.
    pub fn amqp_routing_key(&self) -> Option<&str> {
        self.routing_key.as_deref().or(self.queue.as_deref())
    }
}

impl Deployment {
    /// The flows that start on `channel`, in name order.
    pub fn flows_starting_on<'a>(&'a self, channel: &'a str) -> impl Iterator<Item = &'a Flow> {
        self.flows
            .values()
            .filter(move |flow| flow.starts_on(channel))
    }

    /// Whether messages on `channel` come in: a flow starts on it or a `receive` waits on it.
    /// A channel only emitted to is not consumed, even when it names a queue: its messages are
    /// for someone else.
    pub fn consumes(&self, channel: &str) -> bool {
        self.flows.values().any(|flow| {
            flow.starts_on(channel)
                || flow
                    .nodes
                    .iter()
                    .any(|node| node.kind.receives_on().any(|on| on == channel))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Http,
    Amqp,
    Nats,
}

impl Transport {
    /// The word a document declares it with.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Http => "http",
            Transport::Amqp => "amqp",
            Transport::Nats => "nats",
        }
    }
}

/// When a transport gets its answer for a message that starts or resumes an instance (SPEC §5.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ack {
    /// As soon as the step that consumed the message committed.
    Commit,
    /// When the instance ends, or at `ack_timeout`, whichever comes first.
    Complete,
}

/// A broker consumer's default bound on unacknowledged messages (`prefetch`,
/// `max-ack-pending`): its backpressure.
pub const UNACKED_DEFAULT: u32 = 64;

#[derive(Debug, Clone)]
pub struct Channel {
    pub name: String,
    pub transport: Transport,
    /// The raw JSON Schema and its compiled validator.
    pub schema: Option<Schema>,
    /// CEL over the message's attributes (`data`, `id`, `type`, `source`, `subject`).
    pub correlate: Option<Expr>,
    pub ack: Ack,
    pub ack_timeout: SignedDuration,
    /// AMQP queue to consume from (inbound), and the routing key of `emit` when `routing_key`
    /// is not given.
    pub queue: Option<String>,
    /// AMQP exchange `emit` publishes to; `""`, the default exchange, routes by queue name.
    pub exchange: String,
    /// AMQP routing key of `emit`; the queue's name when absent.
    pub routing_key: Option<String>,
    /// AMQP messages delivered to the consumer and not yet acknowledged, at most.
    pub prefetch: u32,
    /// NATS subject to consume from (inbound) or publish to (outbound).
    pub subject: Option<String>,
    /// NATS JetStream stream the inbound consumer reads.
    pub stream: Option<String>,
    /// NATS durable consumer's name; `sutra-{deployment}-{channel}` when absent.
    pub consumer: Option<String>,
    /// NATS messages delivered to the consumer and not yet acknowledged, at most.
    pub max_ack_pending: u32,
    /// Whether the engine makes the NATS durable consumer when it is missing (`create-consumer`,
    /// default `true`); `false` leaves it to the operator, and a missing one is not consumed.
    pub create_consumer: bool,
    /// Outbound HTTP target of `emit`.
    pub url: Option<String>,
    pub singleton: bool,
    /// Past this many failed sends an outbox row is poisoned. `None`: retry forever.
    pub max_attempts: Option<u32>,
    /// How long an uncorrelated message is kept waiting for a matching `receive` to park.
    pub buffer: Option<SignedDuration>,
}

/// A JSON Schema compiled once at deploy time.
#[derive(Clone)]
pub struct Schema {
    pub source: serde_json::Value,
    pub validator: std::sync::Arc<jsonschema::Validator>,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Schema {
    /// Every violation of `data`, as `(JSON pointer, message)` pairs; empty when valid.
    pub fn violations(&self, data: &serde_json::Value) -> Vec<(String, String)> {
        self.validator
            .iter_errors(data)
            .map(|error| (error.instance_path().to_string(), error.to_string()))
            .collect()
    }
}

/// The position of a node in its flow's node arena.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeIndex(pub u32);

/// One flow: a graph of nodes stored as an arena, entered at `entry`.
#[derive(Debug, Clone)]
pub struct Flow {
    pub name: String,
    /// The channel whose messages start it; `None` for a flow only other flows `call`.
    pub start: Option<Start>,
    /// Every node of the flow, including those inside parallel branches and reminders. Ids are unique flow-wide.
    pub nodes: Vec<Node>,
    /// The first node of the top-level list; `None` for a flow with no nodes (it completes at once).
    pub entry: Option<NodeIndex>,
    /// Each node's index by its id: a token names its node, and a step looks it up at every
    /// visit.
    ids: HashMap<String, NodeIndex>,
}

impl Flow {
    pub fn new(
        name: String,
        start: Option<Start>,
        nodes: Vec<Node>,
        entry: Option<NodeIndex>,
    ) -> Flow {
        let mut ids = HashMap::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            // The first of a repeated id, which the checker refuses anyway.
            ids.entry(node.id.clone()).or_insert(NodeIndex(i as u32));
        }
        Flow {
            name,
            start,
            nodes,
            entry,
            ids,
        }
    }

    /// Whether a message on `channel` starts this flow.
    pub fn starts_on(&self, channel: &str) -> bool {
        matches!(&self.start, Some(Start::Channel(on)) if on == channel)
    }

    /// The channel whose messages start this flow, if messages do.
    pub fn start_channel(&self) -> Option<&str> {
        match &self.start {
            Some(Start::Channel(channel)) => Some(channel),
            _ => None,
        }
    }

    /// The schedule that starts this flow, if one does.
    pub fn schedule(&self) -> Option<&Schedule> {
        match &self.start {
            Some(Start::Schedule(schedule)) => Some(schedule),
            _ => None,
        }
    }

    pub fn node(&self, index: NodeIndex) -> &Node {
        &self.nodes[index.0 as usize]
    }

    pub fn find(&self, id: &str) -> Option<NodeIndex> {
        self.ids.get(id).copied()
    }
}

/// What starts a flow's instances.
#[derive(Debug, Clone)]
pub enum Start {
    /// Each message on the channel.
    Channel(String),
    /// Each tick of a schedule (issue 34, decision 0056): the engine's `scheduler` role starts
    /// the instance, as if a message had come on the flow's [`Schedule::channel`].
    Schedule(Schedule),
}

/// A flow's `start: { schedule }`.
#[derive(Debug, Clone)]
pub struct Schedule {
    pub when: crate::schedule::When,
    /// The IANA name the ticks are read in (`UTC` unless written).
    pub zone_name: String,
    pub zone: jiff::tz::TimeZone,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    /// The started instance's `vars.input`, rendered at the tick with `tick` (its instant, RFC
    /// 3339 in UTC) bound.
    pub input: Template,
}

impl Schedule {
    /// The channel a tick's start is recorded on in the inbox: no deployment can declare it
    /// (a channel name has no `:`), so a tick never collides with a message.
    pub fn channel(flow: &str) -> String {
        format!("schedule:{flow}")
    }

    /// The inbox event id of the tick at `tick` of `flow` in `deployment`: the same from every
    /// replica that fires it, so the inbox starts one instance per tick.
    pub fn event_id(deployment: &str, flow: &str, tick: jiff::Timestamp) -> String {
        format!("{deployment}/{flow}@{tick}")
    }

    /// The expression as written: `cron 0 2 * * *` or `every PT15M`.
    pub fn expression(&self) -> String {
        match &self.when {
            crate::schedule::When::Cron(cron) => format!("cron {}", cron.source()),
            crate::schedule::When::Every(period) => format!("every {period}"),
        }
    }
}

/// What a tick does while the instance the schedule started last still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// Nothing: the tick is skipped.
    Skip,
    /// Starts another instance.
    Allow,
}

/// What a schedule does about the ticks it missed while no replica fired (an outage).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CatchUp {
    /// Nothing: the missed ticks are skipped.
    None,
    /// Fires the latest missed tick once.
    One,
}

#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    pub kind: NodeKind,
    /// Variable that receives a task's output or a received message's `data`.
    pub output: Option<String>,
    /// Where a task's business error or exhausted retries go (`vars.error = {code, message}`).
    pub on_error: Option<NodeIndex>,
    /// Where control goes when this node finishes: its `next`, else the following node of the
    /// same list, else the end of that list.
    pub after: After,
    /// An interrupting timer on a node that waits (`task`, `receive`): when it fires first, the
    /// wait ends and control goes to its `next` (BPMN's interrupting boundary timer event).
    pub deadline: Option<Deadline>,
    /// A non-interrupting timer on a node that waits: each time it fires while the node still
    /// waits, its branch runs beside it (BPMN's non-interrupting boundary timer event).
    pub remind: Option<Remind>,
    /// The handler that undoes this node once it completed: run only by a `compensate` node,
    /// once per completion (BPMN's compensation boundary event and its handler).
    pub compensate_with: Option<NodeIndex>,
}

/// A node's `deadline`.
#[derive(Debug, Clone)]
pub struct Deadline {
    pub after: SignedDuration,
    pub next: NodeIndex,
}

/// A node's `remind`.
#[derive(Debug, Clone)]
pub struct Remind {
    /// From the moment the node parks to the first reminder.
    pub after: SignedDuration,
    /// Between reminders after the first; `None`: only one.
    pub every: Option<SignedDuration>,
    /// The first node of the reminder's own list; `None` for an empty list (the reminder is
    /// recorded, nothing runs).
    pub head: Option<NodeIndex>,
}

/// Where a token goes when its node is done.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    Node(NodeIndex),
    /// The end of the token's list: a branch token ends (and may complete its join); the
    /// top-level token completes the instance.
    End,
}

#[derive(Debug, Clone)]
pub enum NodeKind {
    /// Assigns top-level variables, in document order.
    Set(Vec<(String, Template)>),
    Task(TaskSpec),
    Emit(EmitSpec),
    Receive(ReceiveSpec),
    Wait(WaitSpec),
    Choice(ChoiceSpec),
    /// One entry per branch: the branch's first node, or `None` for an empty branch.
    Parallel(Vec<Option<NodeIndex>>),
    /// Whichever arm fires first wins; the others are disarmed in the same step (BPMN's
    /// event-based gateway).
    Race(Vec<RaceArm>),
    /// One body per item of a list, at most `concurrency` at a time, the results collected in
    /// item order (BPMN's multi-instance activity).
    ForEach(ForEachSpec),
    /// Runs another flow of the deployment as an instance of its own (a child) and waits for
    /// it to end (BPMN's call activity).
    Call(CallSpec),
    /// A block of nodes (its first, `None` for an empty block): a failure inside that nothing
    /// inside catches goes to the node's `on-error`, and its `deadline` ends every token inside
    /// (BPMN's embedded subprocess with boundary events).
    Scope(Option<NodeIndex>),
    /// Runs the handler of every completed node that declared one, newest first, one at a
    /// time, then goes on: only those completed inside the scope named, when one is (BPMN's
    /// compensation throw event).
    Compensate {
        scope: Option<String>,
    },
    End {
        reply: Option<Template>,
    },
    Fail {
        code: String,
        detail: Option<Template>,
    },
}

impl NodeKind {
    /// The YAML key that names this kind.
    pub fn name(&self) -> &'static str {
        match self {
            NodeKind::Set(_) => "set",
            NodeKind::Task(_) => "task",
            NodeKind::Emit(_) => "emit",
            NodeKind::Receive(_) => "receive",
            NodeKind::Wait(_) => "wait",
            NodeKind::Choice(_) => "choice",
            NodeKind::Parallel(_) => "parallel",
            NodeKind::Race(_) => "race",
            NodeKind::ForEach(_) => "for-each",
            NodeKind::Call(_) => "call",
            NodeKind::Scope(_) => "scope",
            NodeKind::Compensate { .. } => "compensate",
            NodeKind::End { .. } => "end",
            NodeKind::Fail { .. } => "fail",
        }
    }
}

impl NodeKind {
    /// The channels whose messages this node waits for: a `receive`'s, or its arms' for a
    /// `race`.
    pub fn receives_on(&self) -> impl Iterator<Item = &str> {
        let (single, arms) = match self {
            NodeKind::Receive(receive) => (Some(receive.channel.as_str()), &[][..]),
            NodeKind::Race(arms) => (None, arms.as_slice()),
            _ => (None, &[][..]),
        };
        let armed = arms.iter().filter_map(|arm| match &arm.waits {
            ArmWait::Receive { channel, .. } => Some(channel.as_str()),
            ArmWait::Wait(_) => None,
        });
        single.into_iter().chain(armed)
    }
}

pub const TASK_RETRIES_DEFAULT: u32 = 3;
pub const TASK_BACKOFF_DEFAULT: SignedDuration = SignedDuration::from_secs(5);
pub const TASK_LOCK_DEFAULT: SignedDuration = SignedDuration::from_secs(300);
pub const ACK_TIMEOUT_DEFAULT: SignedDuration = SignedDuration::from_secs(30);

#[derive(Debug, Clone)]
pub struct TaskSpec {
    pub topic: String,
    pub input: Template,
    pub retries: u32,
    /// The first retry's delay; each further retry doubles it.
    pub backoff: SignedDuration,
    pub lock: SignedDuration,
}

#[derive(Debug, Clone)]
pub struct EmitSpec {
    pub channel: String,
    pub data: Template,
    pub key: Option<Expr>,
}

#[derive(Debug, Clone)]
pub struct ReceiveSpec {
    pub channel: String,
    /// Evaluated over the instance's variables when the token parks; must equal the message's
    /// correlation key (the channel's `correlate`).
    pub key: Expr,
    pub timeout: Option<SignedDuration>,
    pub on_timeout: Option<NodeIndex>,
}

#[derive(Debug, Clone)]
pub enum WaitSpec {
    Duration(SignedDuration),
    /// Yields a CEL timestamp or an RFC 3339 string.
    Until(Expr),
}

#[derive(Debug, Clone)]
pub struct ChoiceSpec {
    pub arms: Vec<ChoiceArm>,
    pub otherwise: Option<NodeIndex>,
}

#[derive(Debug, Clone)]
pub struct ChoiceArm {
    pub when: Expr,
    pub next: NodeIndex,
}

/// One arm of a `race`.
#[derive(Debug, Clone)]
pub struct RaceArm {
    pub waits: ArmWait,
    /// Variable that receives the winning message's `data`.
    pub output: Option<String>,
    /// Where the race goes on when this arm wins: its `next`, else the node after the race.
    pub after: After,
}

/// What a race arm waits for: a message, or a time.
#[derive(Debug, Clone)]
pub enum ArmWait {
    Receive { channel: String, key: Expr },
    Wait(WaitSpec),
}

/// A `for-each` node's loop.
#[derive(Debug, Clone)]
pub struct ForEachSpec {
    /// Yields the list; rendered when the token reaches the node.
    pub items: Template,
    /// The name under which the body's templates see the item (`item` unless `as` says
    /// otherwise); its position in the list, from 0, is `index`. Neither is stored in `vars`.
    pub item: String,
    /// Bodies running at once, at most; `None`: every item at once.
    pub concurrency: Option<u32>,
    pub body: Body,
}

/// What a `for-each` runs for each item.
#[derive(Debug, Clone)]
pub enum Body {
    Task(TaskSpec),
    Call(CallSpec),
}

/// A called flow: a `call` node's, or a `for-each` body's.
#[derive(Debug, Clone)]
pub struct CallSpec {
    /// A flow of the same deployment document; the child runs on the caller's version.
    pub flow: String,
    /// The child's `vars.input`, rendered when the token reaches the node.
    pub input: Template,
}
