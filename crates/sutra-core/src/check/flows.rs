//! Flows: the node lists, their ids, and the jumps between them.
//!
//! A flow is read in two passes. The first lays out every node in the arena (parallel branches
//! included, in document order) and registers the ids, so that the second can resolve any jump,
//! forwards or backwards, while it builds each node.
//!
//! Decided: like AWS Step Functions, parallel branches are self-contained. A jump must land in the
//! list it starts from; a branch leaves only by ending, and the flow continues after the join.
//! A reminder's `nodes` are a list of their own too, laid out like a branch: they run beside the
//! waiting node and end on their own.

use std::collections::{BTreeMap, HashMap};

use crate::diagnostic::{Diagnostic, Span};
use crate::model::{After, Flow, NodeIndex, Start};
use crate::step::TRANSITIONS_PER_STEP_DEFAULT;
use crate::yaml::{Entry, Node};

use super::channels::Channels;
use super::reader::{Checker, NameRule, suggestion};
use super::{LOWERCASE_NAME, calls, compensation, for_each, graph, nodes, schedule};

/// The most nodes a flow has, parallel branches and reminders included: as many as one step
/// visits by default, so that a straight sequence of them still runs in a step, and far more
/// than any flow written by hand.
pub const FLOW_NODES_MAX: usize = TRANSITIONS_PER_STEP_DEFAULT as usize;

/// Node ids: jumps, history and `migrate --map old=new` refer to them.
const NODE_ID: NameRule = NameRule {
    first: |c| c.is_ascii_alphanumeric() || c == '_',
    rest: |c| c.is_ascii_alphanumeric() || c == '_' || c == '-',
    max_chars: 63,
    hint: "use 1 to 63 letters, digits, `_` and `-`, such as `debit` or `charge-card`",
};

pub(super) fn read(
    cx: &mut Checker,
    node: &Node,
    label: &str,
    channels: &Channels,
) -> BTreeMap<String, Flow> {
    let example = "flows: { transfer: { start: { channel: requests }, nodes: [...] } }";
    let Some(entries) = cx.map(node, label, example) else {
        return BTreeMap::new();
    };
    let mut starters = Starters::default();
    let flows = entries
        .iter()
        .filter_map(|entry| {
            let label = format!("flow name `{}`", entry.key);
            cx.name_ok(&entry.key, entry.key_span, &label, &LOWERCASE_NAME);
            let flow = flow(cx, entry, channels, &mut starters)?;
            Some((entry.key.clone(), flow))
        })
        .collect();
    calls::resolve(cx, entries);
    flows
}

/// Which flow starts on each channel. Intake starts one flow per message, so two flows on one
/// channel would leave the second dead (decision 0007).
#[derive(Default)]
struct Starters<'a> {
    by_channel: HashMap<String, &'a str>,
}

impl<'a> Starters<'a> {
    fn claim(&mut self, cx: &mut Checker, channel: &str, flow: &'a str, at: Span) {
        match self.by_channel.get(channel) {
            Some(first) => cx.report(
                Diagnostic::error(
                    "shared-start-channel",
                    at,
                    format!("flows `{first}` and `{flow}` both start on channel `{channel}`"),
                )
                .with_hint("a message starts one flow: give each flow a channel of its own"),
            ),
            None => {
                self.by_channel.insert(channel.to_owned(), flow);
            }
        }
    }
}

fn flow<'a>(
    cx: &mut Checker,
    entry: &'a Entry,
    channels: &Channels,
    starters: &mut Starters<'a>,
) -> Option<Flow> {
    let (name, node, at) = (entry.key.as_str(), &entry.value, entry.key_span);
    let example = "{ start: { channel: requests }, nodes: [...] }";
    let record = cx.record(node, format!("flow `{name}`"), at, example)?;
    cx.unknown_fields(&record, &["start", "nodes"]);
    // Without a `start`, only a call runs the flow: `calls::resolve` checks that one does.
    let start = record
        .entry("start")
        .map(|entry| start(cx, entry, name, channels, starters));
    let nodes = cx
        .required(
            &record,
            "nodes",
            "add `nodes:` with the list of the flow's nodes",
        )
        .and_then(|node| {
            cx.list(
                node,
                &record.label("nodes"),
                "nodes: [{ id: done, end: {} }]",
            )
        })?;
    let errors = cx.errors();
    let outline = Outline::of(cx, name, nodes);
    if outline.slots.len() > FLOW_NODES_MAX
        && let Some(entry) = record.entry("nodes")
    {
        let message = format!(
            "flow `{name}` has {} nodes, parallel branches and reminders included; a flow has \
             at most {FLOW_NODES_MAX}",
            outline.slots.len()
        );
        let hint = "split it into flows that hand over by a channel: one step runs at most \
                    a budget of node visits, and every visit is recorded in the history";
        cx.report(Diagnostic::error("flow-too-large", entry.key_span, message).with_hint(hint));
    }
    cx.loop_names = outline.loop_names();
    let nodes: Vec<_> = (0..outline.slots.len())
        .map(|index| nodes::build(cx, &outline, NodeIndex(index as u32), channels))
        .collect();
    cx.loop_names.clear();
    let entry = outline.lists[0].members.first().copied();
    // Reachability over a graph with broken links would only add noise to the real errors.
    if cx.errors() == errors {
        let spans: Vec<Span> = outline.slots.iter().map(|slot| slot.at).collect();
        graph::warn_unreachable(cx, &nodes, entry, &spans);
        compensation::check_handlers(cx, &nodes, &spans);
    }
    // A `start` written but refused leaves no flow; one not written, a flow only calls run.
    let start = match start {
        Some(read) => Some(read?),
        None => None,
    };
    Some(Flow::new(name.to_owned(), start, nodes, entry))
}

fn start<'a>(
    cx: &mut Checker,
    entry: &Entry,
    flow: &'a str,
    channels: &Channels,
    starters: &mut Starters<'a>,
) -> Option<Start> {
    let what = format!("the `start` of flow `{flow}`");
    let record = cx.record(&entry.value, what, entry.key_span, "{ channel: requests }")?;
    cx.unknown_fields(&record, &["channel", "schedule"]);
    match (record.entry("channel"), record.entry("schedule")) {
        (Some(channel), None) => {
            let node = &channel.value;
            let (channel, declared) = channels.lookup(cx, node, &record.label("channel"))?;
            declared.check_consumable(cx, &channel, node.span, &format!("flow `{flow}`"));
            starters.claim(cx, &channel, flow, node.span);
            Some(Start::Channel(channel))
        }
        (None, Some(entry)) => schedule::read(cx, entry, flow).map(Start::Schedule),
        (Some(channel), Some(entry)) => {
            let later = if channel.key_span.index > entry.key_span.index {
                channel
            } else {
                entry
            };
            cx.report(
                Diagnostic::error(
                    "start-channel-and-schedule",
                    later.key_span,
                    format!("{} has both `channel` and `schedule`", record.what),
                )
                .with_hint(
                    "a flow starts on messages or on a schedule: keep one of them; to start the \
                     same work both ways, move its nodes to a flow without `start` and `call` it \
                     from two flows, one started each way",
                ),
            );
            // Its own mistakes are worth reporting in the same run.
            schedule::read(cx, entry, flow);
            None
        }
        (None, None) => {
            cx.report(
                Diagnostic::error(
                    "missing-field",
                    record.at,
                    format!("{} has no `channel` or `schedule`", record.what),
                )
                .with_hint(
                    "add `channel: <channel name>` for a flow that messages start, or \
                     `schedule: { cron: \"0 2 * * *\" }` for one that a schedule starts",
                ),
            );
            None
        }
    }
}

/// One node as laid out by the first pass.
pub(super) struct Slot<'a> {
    pub node: &'a Node,
    pub id: Option<&'a str>,
    /// Where messages about the node point: its id, else its first key.
    pub at: Span,
    /// Index into [`Outline::lists`].
    pub list: usize,
    /// Position in that list.
    position: usize,
    /// A parallel node's branches (indices into [`Outline::lists`]); `None` when they are
    /// malformed or the node is not a parallel.
    pub branches: Option<Vec<usize>>,
    /// The list of the node's `remind` `nodes` (an index into [`Outline::lists`]); `None` when
    /// the node has no such list or it is malformed (the second pass reports how).
    pub reminder: Option<usize>,
    /// The list of a `scope` node's `nodes`, as `reminder` is.
    pub scope: Option<usize>,
}

/// Whose list a list is.
#[derive(Clone, Copy)]
pub(super) enum Owner {
    /// The flow's top-level list.
    Flow,
    /// A branch of a parallel node, by its 1-based number.
    Branch(NodeIndex, usize),
    /// The `remind` `nodes` of a waiting node.
    Reminder(NodeIndex),
    /// The `nodes` of a `scope` node.
    Scope(NodeIndex),
}

/// A list of nodes: the flow's top-level list, one parallel branch, or one reminder's nodes.
pub(super) struct List {
    pub owner: Owner,
    pub members: Vec<NodeIndex>,
}

/// The first pass over a flow: every node in arena order, the lists, and the ids.
pub(super) struct Outline<'a> {
    pub flow: &'a str,
    pub slots: Vec<Slot<'a>>,
    pub lists: Vec<List>,
    ids: HashMap<&'a str, NodeIndex>,
}

impl<'a> Outline<'a> {
    fn of(cx: &mut Checker, flow: &'a str, nodes: &'a [Node]) -> Outline<'a> {
        let mut outline = Outline {
            flow,
            slots: Vec::new(),
            lists: Vec::new(),
            ids: HashMap::new(),
        };
        outline.lay_out(cx, nodes, Owner::Flow);
        outline
    }

    /// Lays out one list. Recursion follows the nesting of branches and reminders, which the
    /// YAML depth bounds.
    fn lay_out(&mut self, cx: &mut Checker, nodes: &'a [Node], owner: Owner) {
        let list = self.lists.len();
        self.lists.push(List {
            owner,
            members: Vec::new(),
        });
        for node in nodes {
            let index = NodeIndex(self.slots.len() as u32);
            let id = self.register(cx, node, index);
            let at = node
                .entry("id")
                .map(|entry| entry.value.span)
                .or_else(|| node.as_map()?.first().map(|entry| entry.key_span))
                .unwrap_or(node.span);
            let members = &mut self.lists[list].members;
            let position = members.len();
            members.push(index);
            self.slots.push(Slot {
                node,
                id,
                at,
                list,
                position,
                branches: None,
                reminder: None,
                scope: None,
            });
            let branches = self.branches(cx, node, index, id);
            self.slots[index.0 as usize].branches = branches;
            let reminder = self.reminder(cx, node, index);
            self.slots[index.0 as usize].reminder = reminder;
            let scope = self.scope(cx, node, index);
            self.slots[index.0 as usize].scope = scope;
        }
    }

    /// Lays out the list of a `scope` node's `nodes`; the second pass reports a malformed one.
    fn scope(&mut self, cx: &mut Checker, node: &'a Node, index: NodeIndex) -> Option<usize> {
        let nodes = node.entry("scope")?.value.entry("nodes")?.value.as_seq()?;
        let list = self.lists.len();
        self.lay_out(cx, nodes, Owner::Scope(index));
        Some(list)
    }

    /// Lays out the list of a node's `remind` `nodes`, whatever the node's kind: the second
    /// pass reports a `remind` where it does not belong, and a malformed one.
    fn reminder(&mut self, cx: &mut Checker, node: &'a Node, index: NodeIndex) -> Option<usize> {
        let nodes = node.entry("remind")?.value.entry("nodes")?.value.as_seq()?;
        let list = self.lists.len();
        self.lay_out(cx, nodes, Owner::Reminder(index));
        Some(list)
    }

    /// The node's id when it is valid; duplicates are reported where they repeat.
    fn register(&mut self, cx: &mut Checker, node: &'a Node, index: NodeIndex) -> Option<&'a str> {
        let value = &node.entry("id")?.value;
        let id = cx.named(value, "node id", &NODE_ID)?;
        if let Some(&first) = self.ids.get(id) {
            let line = self.slots[first.0 as usize].at.line;
            cx.report(
                Diagnostic::error(
                    "duplicate-id",
                    value.span,
                    format!("node id `{id}` is already used in flow `{}`", self.flow),
                )
                .with_hint(format!(
                    "the first `{id}` is on line {line}; node ids must be unique in the flow, parallel branches and reminders included"
                )),
            );
            return Some(id);
        }
        self.ids.insert(id, index);
        Some(id)
    }

    /// Lays out a parallel node's branches.
    fn branches(
        &mut self,
        cx: &mut Checker,
        node: &'a Node,
        index: NodeIndex,
        id: Option<&str>,
    ) -> Option<Vec<usize>> {
        let entry = node.entry("parallel")?;
        let owner = id.map_or_else(|| "the node".to_owned(), |id| format!("node `{id}`"));
        let label = format!("the `parallel` of {owner}");
        let example = "parallel: [[{ id: a, ... }], [{ id: b, ... }]]";
        let branches = cx.list(&entry.value, &label, example)?;
        if branches.is_empty() {
            cx.report(
                Diagnostic::error(
                    "invalid-value",
                    entry.value.span,
                    format!("{label} has no branches"),
                )
                .with_hint(format!("give it at least one branch: `{example}`")),
            );
            return None;
        }
        let mut lists = Vec::new();
        let mut valid = true;
        for (number, branch) in (1..).zip(branches) {
            let branch_label = format!("branch {number} of {label}");
            match cx.list(branch, &branch_label, "- - { id: a, ... }") {
                Some(nodes) => {
                    lists.push(self.lists.len());
                    self.lay_out(cx, nodes, Owner::Branch(index, number));
                }
                None => valid = false,
            }
        }
        valid.then_some(lists)
    }

    /// The names the flow's `for-each` bodies see their item and its position under.
    fn loop_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .slots
            .iter()
            .filter_map(|slot| {
                let spec = &slot.node.entry("for-each")?.value;
                let name = spec.entry("as").and_then(|entry| entry.value.as_str());
                Some(name.unwrap_or(for_each::ITEM_DEFAULT).to_owned())
            })
            .collect();
        if !names.is_empty() {
            names.push(for_each::INDEX.to_owned());
        }
        names
    }

    pub fn slot(&self, index: NodeIndex) -> &Slot<'a> {
        &self.slots[index.0 as usize]
    }

    /// Where control goes after `index` without a `next`: the following node of its list.
    pub fn following(&self, index: NodeIndex) -> After {
        let slot = self.slot(index);
        self.lists[slot.list]
            .members
            .get(slot.position + 1)
            .map_or(After::End, |&next| After::Node(next))
    }

    /// "the top-level list", "branch 2 of parallel `both`", "the reminder of node `approve`".
    fn describe_list(&self, list: usize) -> String {
        match self.lists[list].owner {
            Owner::Flow => "the top-level list".to_owned(),
            Owner::Branch(parallel, number) => {
                let owner = self.slot(parallel).id.unwrap_or("?");
                format!("branch {number} of parallel `{owner}`")
            }
            Owner::Reminder(host) => {
                let owner = self.slot(host).id.unwrap_or("?");
                format!("the reminder of node `{owner}`")
            }
            Owner::Scope(host) => {
                let owner = self.slot(host).id.unwrap_or("?");
                format!("scope `{owner}`")
            }
        }
    }

    /// Resolves the id in `target` to a node anywhere in the flow: a compensation handler,
    /// which only compensation reaches, so no list's bounds apply.
    pub fn find(&self, cx: &mut Checker, target: &Node, label: &str) -> Option<NodeIndex> {
        let id = cx.text(target, label)?;
        if let Some(&index) = self.ids.get(id) {
            return Some(index);
        }
        let known: Vec<&str> = self.slots.iter().filter_map(|slot| slot.id).collect();
        cx.report(
            Diagnostic::error(
                "dangling-reference",
                target.span,
                format!(
                    "{label} refers to `{id}`, which is not a node of flow `{}`",
                    self.flow
                ),
            )
            .with_hint(suggestion(id, &known, "the flow's nodes are")),
        );
        None
    }

    /// Resolves a jump from node `from` to the id in `target`.
    pub fn jump(
        &self,
        cx: &mut Checker,
        from: NodeIndex,
        target: &Node,
        label: &str,
    ) -> Option<NodeIndex> {
        let id = cx.text(target, label)?;
        let list = self.slot(from).list;
        let Some(&to) = self.ids.get(id) else {
            let reachable: Vec<&str> = self.lists[list]
                .members
                .iter()
                .filter_map(|&member| self.slot(member).id)
                .collect();
            cx.report(
                Diagnostic::error(
                    "dangling-reference",
                    target.span,
                    format!(
                        "{label} refers to `{id}`, which is not a node of flow `{}`",
                        self.flow
                    ),
                )
                .with_hint(suggestion(
                    id,
                    &reachable,
                    &format!("add a node with `id: {id}`, or jump to one of"),
                )),
            );
            return None;
        };
        let target_list = self.slot(to).list;
        if target_list != list {
            let owners = [list, target_list].map(|list| self.lists[list].owner);
            let reminder = owners
                .iter()
                .any(|owner| matches!(owner, Owner::Reminder(_)));
            let scope = owners.iter().any(|owner| matches!(owner, Owner::Scope(_)));
            let hint = if scope {
                "a scope's nodes are a block: a jump must stay inside it; let the block end (or \
                 fail, to reach the scope's `on-error`), and put what follows after the `scope` \
                 node"
            } else if reminder {
                "a reminder's nodes are self-contained: they run beside the waiting node, and a \
                 jump must stay in their own list; to leave the wait, give the node a `deadline`"
            } else {
                "parallel branches are self-contained: a jump must stay in its own list; \
                 let the branch end, and put what follows the join after the `parallel` node"
            };
            cx.report(
                Diagnostic::error(
                    "cross-branch-jump",
                    target.span,
                    format!(
                        "{label} jumps from {} to `{id}` in {}",
                        self.describe_list(list),
                        self.describe_list(target_list)
                    ),
                )
                .with_hint(hint),
            );
            return None;
        }
        Some(to)
    }
}
