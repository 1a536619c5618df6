//! Migration (SPEC §7.4): a suspended or failed instance moved onto another version of its flow,
//! each token's node mapped (`map`, default: the same id).
//!
//! Everything is checked before anything changes: every name the map gives must be a node of
//! the version it names, and every token must land on a node of the target version; a token
//! parked at a `receive`, `task`, `wait` or `race` must land on a node of the same kind, since what it
//! waits for (a message, a worker, a timer) is that kind's. A refusal says which token or which
//! entry of the map is wrong, and what to do.
//!
//! A suspended instance's parks are disarmed and each parked token runs its new node again,
//! which parks it there: a `receive` waits on the key the new node computes, a `task` is
//! offered again under the new node's topic and input (a worker holding the old one loses its
//! lock), a `wait` starts its timer afresh, a `race` arms its arms again; reminders and
//! deadlines start afresh with the node that parks. A failed instance stays failed: its parked tokens are
//! left ready at their new nodes, and `restore` runs them there.

use std::collections::BTreeMap;

use serde_json::json;

use super::{Run, boundary, call};
use crate::model::{Flow, NodeKind};
use crate::snapshot::{Park, Snapshot, Status, Token, TokenId, TokenState};
use crate::step::{HistoryKind, Rejection, Step, StepContext};

/// Moves the instance of `snapshot`, running `from`, onto `to`, version `version` of its
/// deployment.
pub fn migrate(
    from: &Flow,
    to: &Flow,
    version: u32,
    snapshot: &Snapshot,
    map: &BTreeMap<String, String>,
    ctx: StepContext,
) -> Result<Step, Rejection> {
    if !matches!(snapshot.status, Status::Suspended | Status::Failed) {
        return Err(Rejection::InvalidState {
            event: "migrate",
            status: snapshot.status.as_str(),
        });
    }
    check_map(from, to, snapshot.instance.version, version, map)?;
    for token in &snapshot.tokens {
        check_landing(from, to, version, &token.node, landing(map, &token.node))?;
    }
    let mut run = Run::new(to, snapshot, ctx);
    let suspended = snapshot.status == Status::Suspended;
    // A suspended instance's waits for its children are kept, park and child alike: the child
    // runs on, and its end answers the same park on the new version.
    let keeps_child = |token: &Token| suspended && call::waits_for_child(token);
    if suspended {
        let released: Vec<Park> = (run.snap.tokens.iter())
            .filter(|token| !keeps_child(token))
            .filter_map(|token| token.park().cloned())
            .collect();
        for park in &released {
            run.release(park);
        }
    }
    // Satellites (race arms, reminder timers) go: the token they serve runs its new node
    // again, which arms that node's own — except a loop's, and a kept call's, whose token does
    // not run its node again: their timers are kept, with their due times, and armed again
    // below.
    let staying: Vec<TokenId> = (run.snap.tokens.iter())
        .filter(|token| {
            // A loop's, or a scope's (waiting for its block as a join does).
            matches!(
                token.state,
                TokenState::Looping { .. } | TokenState::Joining { .. }
            ) || keeps_child(token)
        })
        .map(|token| token.id)
        .collect();
    let kept = |token: &Token| {
        !boundary::is_satellite(token) || token.parent.is_some_and(|p| staying.contains(&p))
    };
    run.snap.tokens.retain(kept);
    for token in &mut run.snap.tokens {
        token.node = landing(map, &token.node).to_owned();
        let parked = matches!(token.state, TokenState::Parked(_));
        let reruns = parked && !boundary::is_satellite(token) && !keeps_child(token);
        if reruns || token.state == TokenState::Racing {
            token.state = TokenState::Ready;
        }
    }
    if suspended {
        run.rearm_satellites();
    }
    if let Some(failure) = &mut run.snap.failure
        && let Some(node) = &mut failure.node
    {
        *node = landing(map, node).to_owned();
    }
    run.snap.instance.version = version;
    run.instance["version"] = json!(version);
    let detail = json!({"from": snapshot.instance.version, "to": version, "map": map});
    run.record(HistoryKind::Migrated, None, detail);
    if suspended {
        run.run();
    }
    Ok(run.finish())
}

/// Where a token at `node` lands: its entry in the map, else a node of the same id.
fn landing<'a>(map: &'a BTreeMap<String, String>, node: &'a str) -> &'a str {
    map.get(node).map_or(node, String::as_str)
}

/// Every name in `map` must be a node: a key of the version migrated from, a value of the one
/// migrated to.
fn check_map(
    from: &Flow,
    to: &Flow,
    from_version: u32,
    to_version: u32,
    map: &BTreeMap<String, String>,
) -> Result<(), Rejection> {
    for (old, new) in map {
        if from.find(old).is_none() {
            return Err(Rejection::Unmigratable(format!(
                "the map names node `{old}`, which version {from_version} of flow `{}` does not \
                 have: map only the nodes the instance's tokens are at",
                from.name
            )));
        }
        if to.find(new).is_none() {
            return Err(Rejection::Unmigratable(format!(
                "the map sends `{old}` to node `{new}`, which version {to_version} of flow `{}` \
                 does not have",
                to.name
            )));
        }
    }
    Ok(())
}

/// A token at `old` lands on `new` of `to`: a node there, of the same kind when it waits.
fn check_landing(
    from: &Flow,
    to: &Flow,
    version: u32,
    old: &str,
    new: &str,
) -> Result<(), Rejection> {
    let Some(target) = to.find(new).map(|index| to.node(index)) else {
        return Err(Rejection::Unmigratable(format!(
            "a token is at node `{old}`, and version {version} of flow `{}` has no node `{new}`: \
             map it onto one (`\"map\": {{\"{old}\": \"<node>\"}}`)",
            to.name
        )));
    };
    let source = from.find(old).map(|index| &from.node(index).kind);
    let waits = |kind: &NodeKind| {
        matches!(
            kind,
            NodeKind::Receive(_)
                | NodeKind::Task(_)
                | NodeKind::Wait(_)
                | NodeKind::Race(_)
                | NodeKind::ForEach(_)
                | NodeKind::Call(_)
                | NodeKind::Scope(_)
        )
    };
    match source {
        Some(kind) if waits(kind) && kind.name() != target.kind.name() => {
            Err(Rejection::Unmigratable(format!(
                "a token waits at `{old}`, a {} node, and `{new}` is a {} node: map it onto a {} \
                 node",
                kind.name(),
                target.kind.name(),
                kind.name()
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::exec::apply;
    use crate::snapshot::{InstanceInfo, ParkKind};
    use crate::step::{Disarm, Effect, Event, Message};

    const V1: &str = r#"
name: shop
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: check
        set: { total: "= vars.input.amount * 2" }
      - id: wait
        receive: { channel: replies, key: vars.input.id }
      - id: done
        end: {}
"#;

    /// Version 2: the receive is renamed and keyed by another field; `check` no longer fails.
    const V2: &str = r#"
name: shop
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.ref }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: check
        set: { total: "= 2" }
      - id: await-reply
        receive: { channel: replies, key: "'ref-' + vars.input.id" }
      - id: done
        end: {}
"#;

    fn flow(source: &str) -> Flow {
        let checked = crate::check::check(source);
        let deployment = checked.deployment.expect("the flow checks");
        deployment.flows["order"].clone()
    }

    fn ctx() -> StepContext {
        StepContext::at(Timestamp::UNIX_EPOCH)
    }

    /// An instance of `flow` started with `data`.
    fn started(flow: &Flow, data: serde_json::Value) -> Snapshot {
        let info = InstanceInfo {
            id: "i-1".into(),
            tenant: "acme".into(),
            deployment: "shop".into(),
            version: 1,
            flow: "order".into(),
            parent: None,
        };
        let message = Message {
            id: "m-1".into(),
            kind: "t".into(),
            source: "s".into(),
            subject: None,
            time: None,
            data,
        };
        apply(flow, &Snapshot::new(info), Event::Start { message }, ctx())
            .unwrap()
            .snapshot
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(old, new)| ((*old).to_owned(), (*new).to_owned()))
            .collect()
    }

    #[test]
    fn a_suspended_instance_is_parked_again_on_the_mapped_node_with_its_new_key() {
        let (v1, v2) = (flow(V1), flow(V2));
        let before = started(&v1, json!({"id": "o1", "amount": 5}));
        let step = migrate(
            &v1,
            &v2,
            2,
            &before,
            &map(&[("wait", "await-reply")]),
            ctx(),
        )
        .unwrap();

        assert_eq!(step.snapshot.instance.version, 2);
        let [token] = step.snapshot.tokens.as_slice() else {
            panic!("one token: {:?}", step.snapshot.tokens);
        };
        assert_eq!(token.node, "await-reply");
        let park = token.park().expect("parked again");
        assert!(
            matches!(&park.kind, ParkKind::Receive { key, .. } if key == "ref-o1"),
            "{park:?}"
        );
        let old = before.tokens[0].park().unwrap();
        assert!(
            step.effects.contains(&Effect::Disarm(Disarm::of(old))),
            "{:?}",
            step.effects
        );
        assert!(
            step.effects
                .iter()
                .any(|e| matches!(e, Effect::Arm { park: p, .. } if p.id == park.id))
        );
        let kinds: Vec<_> = step.history.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [HistoryKind::Migrated, HistoryKind::Parked]);
        assert_eq!(
            step.history[0].detail,
            json!({"from": 1, "to": 2, "map": {"wait": "await-reply"}})
        );
    }

    #[test]
    fn what_does_not_fit_is_refused_and_says_which() {
        let (v1, v2) = (flow(V1), flow(V2));
        let before = started(&v1, json!({"id": "o1", "amount": 5}));
        let refused =
            |pairs: &[(&str, &str)]| match migrate(&v1, &v2, 2, &before, &map(pairs), ctx()) {
                Err(Rejection::Unmigratable(why)) => why,
                other => panic!("refused, not {other:?}"),
            };
        assert!(refused(&[]).contains("has no node `wait`"));
        assert!(refused(&[("nowhere", "done")]).contains("names node `nowhere`"));
        assert!(refused(&[("wait", "nowhere")]).contains("does not have"));
        assert!(
            refused(&[("wait", "check")]).contains("a receive node, and `check` is a set node")
        );
    }

    #[test]
    fn an_ended_instance_cannot_be_migrated() {
        let (v1, v2) = (flow(V1), flow(V2));
        let mut ended = started(&v1, json!({"id": "o1", "amount": 5}));
        ended.status = Status::Completed;
        let refused = migrate(&v1, &v2, 2, &ended, &BTreeMap::new(), ctx());
        assert!(matches!(
            refused,
            Err(Rejection::InvalidState {
                event: "migrate",
                ..
            })
        ));
    }

    #[test]
    fn a_failed_instance_stays_failed_and_its_restore_runs_the_new_version() {
        let (v1, v2) = (flow(V1), flow(V2));
        // `amount` is not a number: `check` fails the instance on v1.
        let failed = started(&v1, json!({"id": "o1", "amount": "x"}));
        assert_eq!(failed.status, Status::Failed);

        let migrated = migrate(&v1, &v2, 2, &failed, &BTreeMap::new(), ctx()).unwrap();
        assert_eq!(migrated.snapshot.status, Status::Failed);
        assert!(
            migrated.effects.is_empty(),
            "a failed instance has no parks armed"
        );

        let restored = apply(&v2, &migrated.snapshot, Event::Restore, ctx()).unwrap();
        let token = &restored.snapshot.tokens[0];
        assert_eq!(
            (restored.snapshot.status, token.node.as_str()),
            (Status::Suspended, "await-reply")
        );
        assert_eq!(restored.snapshot.vars["total"], json!(2));
    }
}
