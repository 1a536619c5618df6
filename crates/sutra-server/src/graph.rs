//! A deployment's flows as graphs (`GET /v1/deployments/{name}/{version}/graph`): each node with
//! where control can go from it, and the `parallel` branch or `scope` block that holds it. The console lays an
//! instance's tokens out on it; the edges are read off the checked model, so they are the ones
//! the engine follows.

use sutra_core::model::{After, ArmWait, Body, Deployment, Flow, NodeIndex, NodeKind, WaitSpec};
use sutra_wire::{Extra, FlowGraph, GraphEdge, GraphNode};

/// The graph of every flow of `deployment`, in name order.
pub fn flows(deployment: &Deployment) -> Vec<FlowGraph> {
    deployment.flows.values().map(flow).collect()
}

fn flow(flow: &Flow) -> FlowGraph {
    let owners = branch_owners(flow);
    let nodes = flow
        .nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let (branch_of, branch) = match owners[i] {
                Some((parallel, branch)) => (Some(flow.node(parallel).id.clone()), Some(branch)),
                None => (None, None),
            };
            GraphNode {
                id: node.id.clone(),
                kind: node.kind.name().to_owned(),
                detail: detail(&node.kind),
                branch_of,
                branch,
                edges: edges(flow, NodeIndex(i as u32)),
                extra: Extra::new(),
            }
        })
        .collect();
    FlowGraph {
        name: flow.name.clone(),
        start: flow.start_channel().map(str::to_owned),
        schedule: flow
            .schedule()
            .map(|schedule| format!("{} in {}", schedule.expression(), schedule.zone_name)),
        entry: flow.entry.map(|entry| flow.node(entry).id.clone()),
        nodes,
        extra: Extra::new(),
    }
}

fn detail(kind: &NodeKind) -> Option<String> {
    match kind {
        NodeKind::Task(task) => Some(task.topic.clone()),
        NodeKind::ForEach(spec) => {
            let body = match &spec.body {
                Body::Task(task) => task.topic.clone(),
                Body::Call(call) => format!("call {}", call.flow),
            };
            Some(match spec.concurrency {
                Some(at_once) => format!("{body} · {at_once} at once"),
                None => body,
            })
        }
        NodeKind::Call(call) => Some(call.flow.clone()),
        NodeKind::Compensate { scope } => scope.as_ref().map(|scope| format!("scope {scope}")),
        NodeKind::Emit(emit) => Some(emit.channel.clone()),
        NodeKind::Receive(receive) => Some(receive.channel.clone()),
        NodeKind::Wait(WaitSpec::Duration(duration)) => Some(format!("{duration:#}")),
        NodeKind::Wait(WaitSpec::Until(until)) => Some(until.source().to_owned()),
        NodeKind::Fail { code, .. } => Some(code.clone()),
        NodeKind::Set(assignments) => Some(
            assignments
                .iter()
                .map(|(name, _)| name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        ),
        NodeKind::Choice(_)
        | NodeKind::Parallel(_)
        | NodeKind::Race(_)
        | NodeKind::Scope(_)
        | NodeKind::End { .. } => None,
    }
}

/// Where control can go from the node at `index`, in the order the engine considers it.
fn edges(flow: &Flow, index: NodeIndex) -> Vec<GraphEdge> {
    let node = flow.node(index);
    let id = |index: NodeIndex| Some(flow.node(index).id.clone());
    let after = |node: &sutra_core::model::Node| match node.after {
        After::Node(next) => id(next),
        After::End => None,
    };
    let mut edges = Vec::new();
    let mut push = |to: Option<String>, label: &str| {
        edges.push(GraphEdge {
            to,
            label: label.to_owned(),
            extra: Extra::new(),
        })
    };
    match &node.kind {
        NodeKind::Choice(choice) => {
            for arm in &choice.arms {
                push(id(arm.next), &format!("when {}", arm.when.source()));
            }
            if let Some(otherwise) = choice.otherwise {
                push(id(otherwise), "otherwise");
            }
        }
        NodeKind::Parallel(branches) => {
            for branch in branches {
                push(branch.and_then(id), "branch");
            }
            push(after(node), "join");
        }
        // A scope's block is drawn as a branch of its own, joined where the scope goes on.
        NodeKind::Scope(head) => {
            push(head.and_then(id), "branch");
            push(after(node), "join");
        }
        NodeKind::End { .. } | NodeKind::Fail { .. } => {}
        NodeKind::Receive(receive) => {
            push(after(node), "next");
            if let Some(on_timeout) = receive.on_timeout {
                push(id(on_timeout), "on-timeout");
            }
        }
        NodeKind::Race(arms) => {
            for (number, arm) in (1..).zip(arms) {
                let to = match arm.after {
                    After::Node(next) => id(next),
                    After::End => None,
                };
                push(to, &format!("arm {number}: {}", arm_label(&arm.waits)));
            }
        }
        NodeKind::Set(_)
        | NodeKind::Task(_)
        | NodeKind::ForEach(_)
        | NodeKind::Call(_)
        | NodeKind::Compensate { .. }
        | NodeKind::Emit(_)
        | NodeKind::Wait(_) => {
            // A compensation handler runs its one node: compensation goes on, not its list.
            let handler = flow.nodes.iter().any(|n| n.compensate_with == Some(index));
            if !handler {
                push(after(node), "next");
            }
        }
    }
    if let Some(on_error) = node.on_error {
        push(id(on_error), "on-error");
    }
    if let Some(handler) = node.compensate_with {
        push(id(handler), "compensate-with");
    }
    if let Some(deadline) = &node.deadline {
        push(id(deadline.next), &format!("deadline {:#}", deadline.after));
    }
    if let Some(remind) = &node.remind {
        push(
            remind.head.and_then(id),
            &format!("remind {:#}", remind.after),
        );
    }
    edges
}

/// What a race arm waits for: `receive <channel>`, `wait <duration>`, `wait until <expr>`.
fn arm_label(waits: &ArmWait) -> String {
    match waits {
        ArmWait::Receive { channel, .. } => format!("receive {channel}"),
        ArmWait::Wait(WaitSpec::Duration(duration)) => format!("wait {duration:#}"),
        ArmWait::Wait(WaitSpec::Until(until)) => format!("wait until {}", until.source()),
    }
}

/// For each node, the `parallel` node whose branch holds it and the branch's index: a branch
/// holds what is reachable from its first node without entering another `parallel`'s branches
/// (those are that node's).
fn branch_owners(flow: &Flow) -> Vec<Option<(NodeIndex, u32)>> {
    let mut owners = vec![None; flow.nodes.len()];
    for (p, node) in flow.nodes.iter().enumerate() {
        let branches = match &node.kind {
            NodeKind::Parallel(branches) => branches.as_slice(),
            NodeKind::Scope(head) => std::slice::from_ref(head),
            _ => continue,
        };
        for (b, first) in branches.iter().enumerate() {
            let mut stack: Vec<NodeIndex> = first.iter().copied().collect();
            while let Some(at) = stack.pop() {
                let slot = &mut owners[at.0 as usize];
                if slot.is_some() {
                    continue;
                }
                *slot = Some((NodeIndex(p as u32), b as u32));
                stack.extend(successors(flow, at));
            }
        }
    }
    owners
}

/// The nodes control goes to from `index` within its own list (a `parallel` node's branches
/// are not in its list; where it goes after the join is).
fn successors(flow: &Flow, index: NodeIndex) -> Vec<NodeIndex> {
    let node = flow.node(index);
    let mut next = Vec::new();
    match &node.kind {
        NodeKind::Choice(choice) => {
            next.extend(choice.arms.iter().map(|arm| arm.next));
            next.extend(choice.otherwise);
        }
        NodeKind::End { .. } | NodeKind::Fail { .. } => {}
        NodeKind::Receive(receive) => next.extend(receive.on_timeout),
        NodeKind::Race(arms) => next.extend(arms.iter().filter_map(|arm| match arm.after {
            After::Node(next) => Some(next),
            After::End => None,
        })),
        _ => {}
    }
    next.extend(node.deadline.as_ref().map(|deadline| deadline.next));
    if !matches!(
        node.kind,
        NodeKind::Choice(_) | NodeKind::End { .. } | NodeKind::Fail { .. } | NodeKind::Race(_)
    ) && let After::Node(after) = node.after
    {
        next.push(after);
    }
    next.extend(node.on_error);
    next
}
