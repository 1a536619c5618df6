//! The model the checker builds: links, entry, defaults, templates.

use jiff::SignedDuration;
use proptest::prelude::*;
use serde_json::json;

use super::check;
use crate::expr::Template;
use crate::model::*;

const MONEY_TRANSFER: &str = include_str!("../../../../examples/brokers/money-transfer.yaml");
const ORDER: &str = include_str!("../../../../examples/brokers/order.yaml");
const APPROVAL: &str = include_str!("../../../../examples/brokers/approval.yaml");

pub(super) fn deployment(source: &str) -> Deployment {
    let checked = check(source);
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
    checked.deployment.expect("a valid document")
}

pub(super) fn node<'f>(flow: &'f Flow, id: &str) -> &'f Node {
    flow.node(flow.find(id).unwrap_or_else(|| panic!("no node `{id}`")))
}

fn after(flow: &Flow, id: &str) -> After {
    node(flow, id).after
}

fn to(flow: &Flow, id: &str) -> After {
    After::Node(flow.find(id).unwrap())
}

#[test]
fn the_examples_check_cleanly() {
    for source in [MONEY_TRANSFER, ORDER, APPROVAL] {
        deployment(source);
    }
}

#[test]
fn control_falls_through_unless_next_says_otherwise() {
    let deployment = deployment(MONEY_TRANSFER);
    let flow = &deployment.flows["money-transfer"];
    assert_eq!(flow.entry, flow.find("payment"));
    assert!(
        matches!(node(flow, "payment").kind, NodeKind::Scope(head) if head == flow.find("debit"))
    );
    assert_eq!(after(flow, "debit"), to(flow, "big"));
    assert_eq!(
        after(flow, "credit"),
        After::End,
        "the end of the scope's block"
    );
    assert_eq!(after(flow, "payment"), to(flow, "notify"));
    assert_eq!(after(flow, "undo"), to(flow, "failed"));
    assert_eq!(node(flow, "debit").compensate_with, flow.find("refund"));
    assert_eq!(after(flow, "refund"), After::End);
}

#[test]
fn choices_and_receives_resolve_their_targets() {
    let deployment = deployment(MONEY_TRANSFER);
    let flow = &deployment.flows["money-transfer"];
    let NodeKind::Choice(choice) = &node(flow, "big").kind else {
        panic!("not a choice");
    };
    assert_eq!(choice.arms.len(), 1);
    assert_eq!(choice.arms[0].next, flow.find("approval").unwrap());
    assert_eq!(choice.otherwise, flow.find("credit"));
    let approval = node(flow, "approval");
    let NodeKind::Receive(receive) = &approval.kind else {
        panic!("not a receive");
    };
    assert_eq!(receive.channel, "bank-replies");
    assert_eq!(receive.key.source(), "vars.input.transferId");
    assert_eq!(receive.timeout, Some(SignedDuration::from_hours(24)));
    assert_eq!(receive.on_timeout, None, "a timeout is the scope's failure");
    assert_eq!(approval.output.as_deref(), Some("approval"));
}

#[test]
fn unset_fields_take_the_documented_defaults() {
    let order = deployment(ORDER);
    assert_eq!(
        order.tenant, None,
        "a document that names no tenant belongs to whoever deploys it"
    );
    assert!(
        order.channels["shipments"].create_consumer,
        "the engine makes a nats channel's consumer unless told not to"
    );
    let deployment = deployment(MONEY_TRANSFER);
    assert_eq!(deployment.tenant.as_deref(), Some("default"));
    let replies = &deployment.channels["bank-replies"];
    assert_eq!(replies.ack, Ack::Commit);
    assert_eq!(replies.ack_timeout, ACK_TIMEOUT_DEFAULT);
    assert_eq!(replies.queue.as_deref(), Some("bank.replies"));
    assert_eq!(deployment.channels["ledger"].max_attempts, Some(10));
    let flow = &deployment.flows["money-transfer"];
    let NodeKind::Task(credit) = &node(flow, "credit").kind else {
        panic!("not a task");
    };
    assert_eq!(credit.retries, TASK_RETRIES_DEFAULT);
    assert_eq!(credit.backoff, TASK_BACKOFF_DEFAULT);
    assert_eq!(credit.lock, TASK_LOCK_DEFAULT);
    let NodeKind::Task(debit) = &node(flow, "debit").kind else {
        panic!("not a task");
    };
    assert_eq!(debit.lock, SignedDuration::from_secs(60));
}

#[test]
fn an_empty_exchange_is_the_amqp_default_exchange_not_a_mistake() {
    let source = "name: shop\nchannels:\n  orders: { transport: http }\n  \
                  bus: { transport: amqp, exchange: \"\", routing-key: billing }\nflows:\n  \
                  order:\n    start: { channel: orders }\n    nodes:\n      - id: out\n        \
                  emit: { channel: bus, data: { ok: true } }\n";
    let bus = &deployment(source).channels["bus"];
    assert_eq!(
        (bus.exchange.as_str(), bus.routing_key.as_deref()),
        ("", Some("billing"))
    );
}

#[test]
fn create_consumer_applies_to_nats_channels_only() {
    let document = |declaration: &str| {
        format!(
            "name: shop\nchannels:\n  orders: {{ transport: http }}\n  out: {declaration}\n\
             flows:\n  order:\n    start: {{ channel: orders }}\n    nodes:\n      - id: out\n        \
             emit: {{ channel: out, data: {{ ok: true }} }}\n"
        )
    };
    let theirs = deployment(&document(
        "{ transport: nats, subject: s, create-consumer: false }",
    ));
    assert!(!theirs.channels["out"].create_consumer);
    let misplaced = check(&document(
        "{ transport: amqp, queue: q, create-consumer: false }",
    ));
    let rules: Vec<&str> = misplaced.diagnostics.iter().map(|d| d.rule).collect();
    assert_eq!(rules, ["misplaced-field"], "{:#?}", misplaced.diagnostics);
}

#[test]
fn parallel_branches_live_in_the_arena_and_end_on_their_own() {
    let deployment = deployment(
        "name: d\nchannels: { c: { transport: http } }\nflows:\n  f:\n    start: { channel: c }\n    \
         nodes:\n      - { id: prepare, parallel: [[{ id: reserve, task: { topic: r } }], \
         [{ id: charge, task: { topic: c } }]] }\n      - { id: cooling-off, wait: { duration: PT10S } }\n",
    );
    let flow = &deployment.flows["f"];
    assert_eq!(flow.nodes.len(), 4);
    let NodeKind::Parallel(heads) = &node(flow, "prepare").kind else {
        panic!("not a parallel");
    };
    assert_eq!(heads, &[flow.find("reserve"), flow.find("charge")]);
    assert_eq!(after(flow, "reserve"), After::End);
    assert_eq!(after(flow, "charge"), After::End);
    assert_eq!(after(flow, "prepare"), to(flow, "cooling-off"));
    let NodeKind::Wait(WaitSpec::Duration(wait)) = &node(flow, "cooling-off").kind else {
        panic!("not a duration wait");
    };
    assert_eq!(*wait, SignedDuration::from_secs(10));
}

#[test]
fn the_order_example_loops_races_and_bounds_its_approval() {
    let deployment = deployment(ORDER);
    let flow = &deployment.flows["order"];
    let NodeKind::ForEach(reserve) = &node(flow, "reserve-all").kind else {
        panic!("not a for-each");
    };
    assert_eq!(
        (reserve.item.as_str(), reserve.concurrency),
        ("line", Some(5))
    );
    let NodeKind::Race(arms) = &node(flow, "settle").kind else {
        panic!("not a race");
    };
    let nexts: Vec<After> = arms.iter().map(|arm| arm.after).collect();
    assert_eq!(
        nexts,
        [to(flow, "large"), to(flow, "cancelled"), to(flow, "unpaid")]
    );
    let approve = node(flow, "approve");
    let deadline = approve.deadline.as_ref().expect("a deadline");
    assert_eq!(
        (deadline.after, After::Node(deadline.next)),
        (SignedDuration::from_hours(48), to(flow, "escalate"))
    );
    let remind = approve.remind.as_ref().expect("a reminder");
    assert_eq!(
        (remind.every, remind.head),
        (Some(SignedDuration::from_hours(4)), flow.find("nudge"))
    );
}

#[test]
fn an_empty_branch_has_no_head() {
    let deployment = deployment(
        "name: d\nchannels: { c: { transport: http } }\nflows:\n  f:\n    start: { channel: c }\n    \
         nodes:\n      - { id: p, parallel: [[], [{ id: a, end: {} }]] }\n",
    );
    let flow = &deployment.flows["f"];
    let NodeKind::Parallel(heads) = &node(flow, "p").kind else {
        panic!("not a parallel");
    };
    assert_eq!(heads, &[None, flow.find("a")]);
}

#[test]
fn templates_keep_literal_subtrees_whole_and_unescape_double_equals() {
    let deployment = deployment(
        "name: d\nchannels: { c: { transport: http } }\nflows:\n  f:\n    start: { channel: c }\n    \
         nodes:\n      - id: s\n        set:\n          fixed: { a: [1, two], b: '==x' }\n          \
         mixed: { a: 1, b: '= vars.x' }\n",
    );
    let NodeKind::Set(assignments) = &node(&deployment.flows["f"], "s").kind else {
        panic!("not a set");
    };
    let Template::Literal(fixed) = &assignments[0].1 else {
        panic!("not a literal");
    };
    assert_eq!(fixed, &json!({"a": [1, "two"], "b": "=x"}));
    let Template::Map(mixed) = &assignments[1].1 else {
        panic!("not a map template");
    };
    assert!(matches!(mixed[1].1, Template::Expr(_)));
}

#[test]
fn warnings_do_not_withhold_the_deployment() {
    let checked = check(
        "name: d\nchannels: { c: { transport: http } }\nflows:\n  f:\n    start: { channel: c }\n    \
         nodes:\n      - { id: a, end: {} }\n      - { id: b, end: {} }\n",
    );
    assert_eq!((checked.errors(), checked.warnings()), (0, 1));
    assert!(checked.deployment.is_some());
}

#[test]
fn one_run_reports_every_independent_mistake() {
    let checked = check(
        "name: d\nchannels: { c: { transport: htp, correlate: 'data.' } }\nflows:\n  f:\n    \
         start: { channel: x }\n    nodes:\n      - { id: a, task: { topic: t, retries: -1 }, next: zz }\n",
    );
    let rules: Vec<&str> = checked.diagnostics.iter().map(|d| d.rule).collect();
    assert_eq!(
        rules,
        [
            "invalid-value",
            "invalid-expression",
            "undeclared-channel",
            "invalid-value",
            "dangling-reference"
        ]
    );
}

#[test]
fn a_flood_of_mistakes_is_cut_short_but_still_refused() {
    let nodes: String = (0..300)
        .map(|i| format!("      - {{ id: n{i}, wait: {{ duration: soon }} }}\n"))
        .collect();
    let checked = check(&format!(
        "name: d\nchannels: {{ c: {{ transport: http }} }}\nflows:\n  f:\n    \
         start: {{ channel: c }}\n    nodes:\n{nodes}"
    ));
    assert_eq!(checked.diagnostics.len(), super::DIAGNOSTICS_MAX + 1);
    let last = checked.diagnostics.last().unwrap();
    assert_eq!(last.rule, "too-many-diagnostics");
    assert_eq!(last.message, "100 more problems from here on are not shown");
    assert!(checked.deployment.is_none());
}

/// A flow of `n` nodes: `n - 1` `set` nodes and an end.
fn flow_of(n: usize) -> String {
    let nodes: String = (1..n)
        .map(|i| format!("      - {{ id: n{i}, set: {{ x: {i} }} }}\n"))
        .collect();
    format!(
        "name: d\nchannels: {{ c: {{ transport: http }} }}\nflows:\n  f:\n    \
         start: {{ channel: c }}\n    nodes:\n{nodes}      - {{ id: done, end: {{}} }}\n"
    )
}

#[test]
fn a_flow_has_at_most_its_node_limit() {
    deployment(&flow_of(super::FLOW_NODES_MAX));
    let checked = check(&flow_of(super::FLOW_NODES_MAX + 1));
    assert!(checked.deployment.is_none());
    let [too_large] = checked.diagnostics.as_slice() else {
        panic!("one diagnostic: {:#?}", checked.diagnostics);
    };
    assert_eq!(too_large.rule, "flow-too-large");
    assert_eq!(
        (too_large.line, too_large.column),
        (6, 5),
        "located at `nodes:`"
    );
    assert!(
        too_large.message.contains("has 10001 nodes"),
        "{}",
        too_large.message
    );
}

/// A flow `f` on channel `c` (http) with `payments` and `cancellations` correlated, and `nodes`.
fn waiting_flow(nodes: &str) -> String {
    format!(
        "name: d\nchannels:\n  c: {{ transport: http }}\n  \
         payments: {{ transport: http, correlate: data.orderId }}\n  \
         cancellations: {{ transport: http, correlate: data.orderId }}\n  \
         reminders: {{ transport: http, url: 'https://chat.internal/hook' }}\nflows:\n  f:\n    \
         start: {{ channel: c }}\n    nodes:\n{nodes}"
    )
}

pub(super) fn rules(source: &str) -> Vec<&'static str> {
    check(source).diagnostics.iter().map(|d| d.rule).collect()
}

const APPROVE: &str = "      - id: approve
        task: { topic: manual-approval, input: { order: \"= vars.input.orderId\" } }
        deadline: { after: P2D, next: escalate }
        remind:
          after: PT4H
          every: PT2H
          nodes:
            - { id: nudge, emit: { channel: reminders, data: { order: \"= vars.input.orderId\" } } }
            - { id: log, set: { nudged: true } }
      - { id: done, end: {} }
      - { id: escalate, fail: { code: ORDER.NOT_APPROVED } }
";

#[test]
fn a_waiting_node_has_its_deadline_and_its_reminder() {
    let checked = check(&waiting_flow(APPROVE));
    assert!(
        checked.diagnostics.is_empty(),
        "the reminder's nodes are reachable: {:#?}",
        checked.diagnostics
    );
    let deployment = checked.deployment.expect("a valid document");
    let flow = &deployment.flows["f"];
    let approve = node(flow, "approve");
    let deadline = approve.deadline.as_ref().expect("a deadline");
    assert_eq!(deadline.after, SignedDuration::from_hours(48));
    assert_eq!(Some(deadline.next), flow.find("escalate"));
    let remind = approve.remind.as_ref().expect("a reminder");
    assert_eq!(remind.after, SignedDuration::from_hours(4));
    assert_eq!(remind.every, Some(SignedDuration::from_hours(2)));
    assert_eq!(remind.head, flow.find("nudge"));
    assert_eq!(after(flow, "approve"), to(flow, "done"));
    assert_eq!(after(flow, "nudge"), to(flow, "log"));
    assert_eq!(after(flow, "log"), After::End, "a reminder ends on its own");
    assert!(matches!(node(flow, "nudge").kind, NodeKind::Emit(_)));
}

#[test]
fn a_reminder_without_nodes_or_repeat_has_no_head() {
    let deployment = deployment(&waiting_flow(
        "      - id: pay
        receive: { channel: payments, key: vars.input.orderId }
        remind: { after: PT1H }
",
    ));
    let remind = node(&deployment.flows["f"], "pay").remind.clone();
    let remind = remind.expect("a reminder");
    assert_eq!(
        (remind.after, remind.every, remind.head),
        (SignedDuration::from_hours(1), None, None)
    );
}

#[test]
fn a_race_resolves_its_arms() {
    let deployment = deployment(&waiting_flow(
        "      - id: settle
        race:
          - receive: { channel: payments, key: vars.input.orderId }
            output: payment
            next: ship
          - receive: { channel: cancellations, key: vars.input.orderId }
          - wait: { duration: PT1H }
            next: expired
      - { id: cancelled, end: {} }
      - { id: ship, end: {} }
      - { id: expired, fail: { code: ORDER.EXPIRED } }
",
    ));
    let flow = &deployment.flows["f"];
    let NodeKind::Race(arms) = &node(flow, "settle").kind else {
        panic!("not a race");
    };
    let [paid, cancelled, expired] = arms.as_slice() else {
        panic!("three arms: {arms:#?}");
    };
    let ArmWait::Receive { channel, key } = &paid.waits else {
        panic!("not a receive arm");
    };
    assert_eq!(
        (channel.as_str(), key.source()),
        ("payments", "vars.input.orderId")
    );
    assert_eq!(paid.output.as_deref(), Some("payment"));
    assert_eq!(paid.after, to(flow, "ship"));
    assert!(
        matches!(&cancelled.waits, ArmWait::Receive { channel, .. } if channel == "cancellations")
    );
    assert_eq!(cancelled.output, None);
    assert_eq!(
        cancelled.after,
        to(flow, "cancelled"),
        "the node after the race"
    );
    let ArmWait::Wait(WaitSpec::Duration(hour)) = &expired.waits else {
        panic!("not a duration arm");
    };
    assert_eq!(*hour, SignedDuration::from_hours(1));
    assert_eq!(expired.after, to(flow, "expired"));
    assert!(deployment.consumes("cancellations"));
}

#[test]
fn misplaced_boundaries_and_malformed_arms_are_refused() {
    let remind_on_wait = "      - id: w
        wait: { duration: PT1H }
        remind: { after: PT1M, nodes: [{ id: x, end: {} }] }
";
    assert_eq!(rules(&waiting_flow(remind_on_wait)), ["misplaced-field"]);
    let race_with_next = "      - id: r
        race: [{ wait: { duration: PT1M } }, { wait: { duration: PT2M } }]
        next: r
        output: v
";
    let checked = check(&waiting_flow(race_with_next));
    let found: Vec<&str> = checked.diagnostics.iter().map(|d| d.rule).collect();
    assert_eq!(found, ["misplaced-field", "misplaced-field"]);
    assert!(
        checked.diagnostics[0]
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("on its arms")),
        "{:#?}",
        checked.diagnostics
    );
    let arms = "      - id: r
        race:
          - { receive: { channel: payments, key: vars.input.orderId }, wait: { duration: PT1M } }
          - { next: r }
          - { receive: { channel: payments, key: vars.a, timeout: PT1M } }
";
    assert_eq!(
        rules(&waiting_flow(arms)),
        ["multiple-kinds", "missing-kind", "unknown-field"]
    );
    let malformed = "      - id: t
        task: { topic: t }
        deadline: P1D
        remind: { after: 0s, every: PT0S, nodes: {}, extra: 1 }
";
    assert_eq!(
        rules(&waiting_flow(malformed)),
        [
            "wrong-type",
            "invalid-duration",
            "invalid-duration",
            "wrong-type",
            "unknown-field"
        ]
    );
}

const RESERVE_ALL: &str = "      - id: reserve-all
        for-each:
          items: \"= vars.input.items\"
          task: { topic: reserve-stock, input: { sku: \"= item.sku\", at: \"= index\" } }
        output: reservations
        on-error: out-of-stock
      - id: pack
        for-each:
          items: [a, b]
          as: parcel
          concurrency: 2
          task: { topic: pack, input: \"= parcel\", retries: 1, lock: PT1M }
        next: done
      - { id: out-of-stock, fail: { code: ORDER.OUT_OF_STOCK } }
      - { id: done, end: {} }
";

fn for_each<'f>(flow: &'f Flow, id: &str) -> &'f ForEachSpec {
    let NodeKind::ForEach(spec) = &node(flow, id).kind else {
        panic!("`{id}` is not a for-each");
    };
    spec
}

#[test]
fn a_for_each_reads_its_items_its_names_and_its_body() {
    let deployment = deployment(&waiting_flow(RESERVE_ALL));
    let flow = &deployment.flows["f"];
    let reserve = for_each(flow, "reserve-all");
    assert!(
        matches!(&reserve.items, Template::Expr(items) if items.source() == "vars.input.items")
    );
    assert_eq!(reserve.item, "item", "the default name");
    assert_eq!(reserve.concurrency, None, "every item at once");
    let Body::Task(task) = &reserve.body else {
        panic!("not a task body");
    };
    assert_eq!(task.topic, "reserve-stock");
    assert!(matches!(&task.input, Template::Map(_)), "{:?}", task.input);
    assert_eq!(
        (task.retries, task.backoff, task.lock),
        (
            TASK_RETRIES_DEFAULT,
            TASK_BACKOFF_DEFAULT,
            TASK_LOCK_DEFAULT
        )
    );
    let node_of = node(flow, "reserve-all");
    assert_eq!(node_of.output.as_deref(), Some("reservations"));
    assert_eq!(node_of.on_error, flow.find("out-of-stock"));
    assert_eq!(node_of.after, to(flow, "pack"));

    let pack = for_each(flow, "pack");
    assert!(matches!(&pack.items, Template::Literal(items) if *items == json!(["a", "b"])));
    assert_eq!(pack.item, "parcel");
    assert_eq!(pack.concurrency, Some(2));
    let Body::Task(task) = &pack.body else {
        panic!("not a task body");
    };
    assert_eq!(task.topic, "pack");
    assert!(matches!(&task.input, Template::Expr(input) if input.source() == "parcel"));
    assert_eq!((task.retries, task.lock), (1, SignedDuration::from_mins(1)));
    assert_eq!(after(flow, "pack"), to(flow, "done"));
}

#[test]
fn a_for_each_body_sees_only_its_own_item_and_index() {
    let body = |as_name: &str, input: &str| {
        waiting_flow(&format!(
            "      - id: each
        for-each: {{ items: [1], {as_name} task: {{ topic: t, input: {input} }} }}
"
        ))
    };
    assert_eq!(
        rules(&body("", "{ sku: \"= item.sku\", at: \"= index + 1\" }")),
        Vec::<&str>::new()
    );
    assert_eq!(rules(&body("as: line,", "\"= line\"")), Vec::<&str>::new());
    assert_eq!(
        rules(&body("as: line,", "\"= item\"")),
        ["invalid-expression"]
    );
    for shadowing in ["vars", "msg", "instance", "now", "index"] {
        let as_name = format!("as: {shadowing},");
        assert_eq!(
            rules(&body(&as_name, "{}")),
            ["shadowed-name"],
            "{shadowing}"
        );
    }
    assert_eq!(rules(&body("as: 2x,", "{}")), ["invalid-name"]);
    let outside = "      - id: each
        for-each: { items: [1], as: line, task: { topic: t } }
      - { id: after, set: { last: \"= line\" } }
";
    let checked = check(&waiting_flow(outside));
    let [unknown] = checked.diagnostics.as_slice() else {
        panic!("{:#?}", checked.diagnostics);
    };
    assert_eq!(unknown.rule, "invalid-expression");
    assert!(
        unknown
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("`line` is only visible inside the body")),
        "{unknown:#?}"
    );
}

#[test]
fn a_malformed_for_each_is_refused() {
    let each = |fields: &str| {
        waiting_flow(&format!(
            "      - id: each
        for-each: {{ {fields} }}
"
        ))
    };
    assert_eq!(rules(&each("items: [1]")), ["missing-kind"]);
    assert_eq!(
        rules(&each("items: [1], emit: { channel: c }")),
        ["unknown-field"],
        "a body of another kind is not also missing"
    );
    assert_eq!(
        rules(&each(
            "items: [1], task: { topic: t, timeout: PT1M }, size: 2"
        )),
        ["unknown-field", "unknown-field"]
    );
    assert_eq!(
        rules(&each("items: \"abc\", task: { topic: t }")),
        ["wrong-type"]
    );
    assert_eq!(
        rules(&each("items: [1], concurrency: -1, task: { topic: t }")),
        ["invalid-value"]
    );
    assert_eq!(
        rules(&each("items: [1], concurrency: two, task: { topic: t }")),
        ["wrong-type"]
    );
    let timers = "      - id: each
        for-each: { items: [1], task: { topic: t } }
        deadline: { after: P1D, next: each }
        remind: { after: PT1H }
";
    assert!(
        rules(&waiting_flow(timers)).is_empty(),
        "a loop waits for its bodies: it takes a deadline and a reminder"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        check(&text);
    }

    #[test]
    fn never_panics_on_a_damaged_example(
        position in 0usize..4000,
        cut in 0usize..40,
        insert in "[ -~\\t\\n]{0,12}",
    ) {
        let source = APPROVAL;
        let start = source.floor_char_boundary(position.min(source.len()));
        let end = source.floor_char_boundary((start + cut).min(source.len()));
        let damaged = format!("{}{insert}{}", &source[..start], &source[end..]);
        check(&damaged);
    }
}
