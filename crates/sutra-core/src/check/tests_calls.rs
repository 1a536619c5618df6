//! Calls: `call` nodes and bodies, the flows they name, cycles, and flows without a `start`.

use serde_json::Value as Json;

use super::check;
use super::tests::{deployment, node, rules};
use crate::diagnostic::Diagnostic;
use crate::expr::Template;
use crate::model::*;

/// A document with channels `orders` (http) and `reminders` (http, with a url), and `flows`.
fn shop(flows: &str) -> String {
    format!(
        "name: shop\nchannels:\n  orders: {{ transport: http }}\n  \
         reminders: {{ transport: http, url: 'https://chat.internal/hook' }}\nflows:\n{flows}"
    )
}

/// `order`, started on `orders`, calls `shipping` (no `start`) from a node and from a loop's
/// body; `shipping` calls `label`, which is written before it.
const ORDER_SHIPS: &str = "  order:
    start: { channel: orders }
    nodes:
      - id: ship
        call: { flow: shipping, input: { order: \"= vars.input.orderId\" } }
        output: shipment
        on-error: lost
        deadline: { after: P7D, next: late }
        remind:
          after: P1D
          nodes:
            - { id: nudge, emit: { channel: reminders, data: { order: \"= vars.input.orderId\" } } }
      - id: parcels
        for-each:
          items: \"= vars.input.parcels\"
          as: parcel
          concurrency: 2
          call: { flow: shipping, input: { parcel: \"= parcel\", at: \"= index\" } }
        output: shipped
        next: done
      - { id: lost, fail: { code: ORDER.LOST } }
      - { id: late, fail: { code: ORDER.LATE } }
      - { id: done, end: { reply: \"= vars.shipment\" } }
  label:
    nodes: [{ id: printed, end: { reply: { label: ok } } }]
  shipping:
    nodes:
      - { id: print, call: { flow: label } }
      - { id: booked, end: { reply: { booked: true } } }
";

#[test]
fn a_call_runs_a_flow_that_only_calls_start() {
    let deployment = deployment(&shop(ORDER_SHIPS));
    let order = &deployment.flows["order"];
    assert_eq!(order.start_channel(), Some("orders"));
    for called in ["shipping", "label"] {
        assert!(deployment.flows[called].start.is_none(), "{called}");
    }
    assert_eq!(deployment.flows_starting_on("orders").count(), 1);

    let ship = node(order, "ship");
    let NodeKind::Call(call) = &ship.kind else {
        panic!("not a call: {:?}", ship.kind);
    };
    assert_eq!(call.flow, "shipping");
    assert!(matches!(&call.input, Template::Map(_)), "{:?}", call.input);
    assert_eq!(ship.output.as_deref(), Some("shipment"));
    assert_eq!(ship.on_error, order.find("lost"));
    assert_eq!(ship.after, After::Node(order.find("parcels").unwrap()));
    let deadline = ship
        .deadline
        .as_ref()
        .expect("a call waits: it takes a deadline");
    assert_eq!(Some(deadline.next), order.find("late"));
    let remind = ship.remind.as_ref().expect("and a reminder");
    assert_eq!(remind.head, order.find("nudge"));

    let NodeKind::ForEach(parcels) = &node(order, "parcels").kind else {
        panic!("not a for-each");
    };
    assert_eq!(
        (parcels.item.as_str(), parcels.concurrency),
        ("parcel", Some(2))
    );
    let Body::Call(body) = &parcels.body else {
        panic!("not a call body: {:?}", parcels.body);
    };
    assert_eq!(body.flow, "shipping");
    assert!(matches!(&body.input, Template::Map(_)), "{:?}", body.input);

    let NodeKind::Call(print) = &node(&deployment.flows["shipping"], "print").kind else {
        panic!("not a call");
    };
    assert_eq!(print.flow, "label");
    assert!(
        matches!(&print.input, Template::Literal(Json::Null)),
        "`input` defaults to null, as a task's does: {:?}",
        print.input
    );
}

/// The one diagnostic of `source`.
fn only(source: &str) -> Diagnostic {
    let checked = check(source);
    let [diagnostic] = checked.diagnostics.as_slice() else {
        panic!("{:#?}", checked.diagnostics);
    };
    diagnostic.clone()
}

#[test]
fn a_call_names_a_flow_of_the_document() {
    let misspelt = shop(&ORDER_SHIPS.replace("{ flow: label }", "{ flow: lable }"));
    let checked = check(&misspelt);
    let [uncalled, unknown] = checked.diagnostics.as_slice() else {
        panic!("{:#?}", checked.diagnostics);
    };
    assert_eq!(
        (uncalled.rule, uncalled.message.as_str()),
        (
            "missing-field",
            "flow `label` has no `start` and no flow calls it"
        ),
        "a call naming no flow of the document calls nothing"
    );
    assert_eq!(unknown.rule, "unknown-flow");
    assert!(unknown.is_error());
    assert_eq!(
        unknown.message,
        "the `call` of node `print` names flow `lable`, which this document does not define"
    );
    assert_eq!((unknown.line, unknown.column, unknown.length), (33, 36, 5));
    assert_eq!(
        unknown.hint.as_deref(),
        Some("did you mean `label`? flows in this document: `label`, `order` and `shipping`")
    );

    let body = shop(&ORDER_SHIPS.replace(
        "call: { flow: shipping, input: { parcel",
        "call: { flow: parcel-post, input: { parcel",
    ));
    let unknown = only(&body);
    assert_eq!(unknown.rule, "unknown-flow");
    assert!(
        unknown
            .message
            .starts_with("the `call` of the `for-each` of node `parcels` names flow `parcel-post`"),
        "{unknown:#?}"
    );
    assert_eq!(
        unknown.hint.as_deref(),
        Some("flows in this document: `label`, `order` and `shipping`")
    );
}

#[test]
fn a_flow_without_start_must_be_called_by_another() {
    let uncalled = shop(&ORDER_SHIPS.replace(
        "{ id: print, call: { flow: label } }",
        "{ id: print, set: { printed: true } }",
    ));
    let missing = only(&uncalled);
    assert_eq!(missing.rule, "missing-field");
    assert_eq!(
        missing.message,
        "flow `label` has no `start` and no flow calls it"
    );
    assert_eq!(
        (missing.line, missing.column),
        (29, 3),
        "on the flow's name"
    );
    assert_eq!(
        missing.hint.as_deref(),
        Some(
            "add `start: { channel: <channel name> }`, or call it from another flow with \
             `call: { flow: label }`"
        )
    );

    let only_itself = "  order:
    start: { channel: orders }
    nodes: [{ id: done, end: {} }]
  again:
    nodes:
      - { id: loop, call: { flow: again } }
";
    assert_eq!(
        rules(&shop(only_itself)),
        ["missing-field", "call-cycle"],
        "a flow that only calls itself never runs"
    );
}

#[test]
fn flows_calling_one_another_are_warned_about_once_per_cycle() {
    let cycles = "  order:
    start: { channel: orders }
    nodes:
      - { id: first, call: { flow: shipping } }
      - { id: second, call: { flow: shipping } }
      - { id: retry, call: { flow: order } }
  shipping:
    nodes:
      - { id: back, call: { flow: order } }
";
    let checked = check(&shop(cycles));
    assert!(
        checked.deployment.is_some(),
        "a cycle is a warning: a choice may end it"
    );
    let warnings: Vec<(&str, usize, &str)> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule, d.line, d.message.as_str()))
        .collect();
    assert_eq!(
        warnings,
        [
            ("call-cycle", 11, "flow `order` calls itself"),
            (
                "call-cycle",
                14,
                "flows `order` → `shipping` → `order` call one another"
            ),
        ],
        "one warning per cycle, however many calls make it, on the call that closes it"
    );
    assert!(
        checked.diagnostics[0]
            .hint
            .as_deref()
            .is_some_and(|hint| hint.contains("SUTRA.RUNTIME.CALL.DEPTH_EXCEEDED")),
        "{:#?}",
        checked.diagnostics
    );
}

#[test]
fn a_malformed_call_is_refused() {
    let flow = |nodes: &str| {
        shop(&format!(
            "  order:\n    start: {{ channel: orders }}\n    nodes:\n{nodes}  shipping:\n    \
             nodes: [{{ id: done, end: {{}} }}]\n"
        ))
    };
    assert_eq!(
        rules(&flow("      - { id: ship, call: { input: {} } }\n")),
        ["missing-field", "missing-field"],
        "no `flow`, so `shipping` is called by nothing either"
    );
    let unknown = only(&flow(
        "      - { id: ship, call: { flow: shipping, version: 2 } }\n",
    ));
    assert_eq!(unknown.rule, "unknown-field");
    assert_eq!(
        unknown.hint.as_deref(),
        Some("the fields here are `flow` and `input`")
    );
    assert_eq!(
        rules(&flow(
            "      - { id: ship, call: { flow: shipping, input: \"= item\" } }\n"
        )),
        ["invalid-expression"],
        "only a loop's body sees an item"
    );
    let both = only(&flow(
        "      - id: each
        for-each: { items: [1], task: { topic: t }, call: { flow: shipping } }
",
    ));
    assert_eq!(both.rule, "multiple-kinds");
    assert_eq!(
        both.message,
        "the `for-each` of node `each` has two bodies, `task` and `call`"
    );
    let none = only(&flow(
        "      - { id: each, for-each: { items: [1] } }
      - { id: ship, call: { flow: shipping } }
",
    ));
    assert_eq!(none.rule, "missing-kind");
    assert!(
        none.hint
            .as_deref()
            .is_some_and(|hint| hint.contains("`task:") && hint.contains("`call:")),
        "{none:#?}"
    );
    assert_eq!(
        rules(&flow(
            "      - id: r
        race: [{ call: { flow: shipping } }, { wait: { duration: PT1M } }]
"
        )),
        ["invalid-race-arm", "missing-field"],
        "a race waits for messages and times, not for a flow"
    );
}

#[test]
fn a_long_chain_of_calls_is_followed_without_recursion() {
    let chain: String = (0..3000)
        .map(|i| {
            format!(
                "  f{i}:\n    nodes: [{{ id: next, call: {{ flow: f{} }} }}]\n",
                i + 1
            )
        })
        .collect();
    let source = shop(&format!(
        "  order:\n    start: {{ channel: orders }}\n    nodes: [{{ id: first, call: {{ flow: f0 }} }}]\n\
         {chain}  f3000:\n    nodes: [{{ id: last, call: {{ flow: order }} }}]\n"
    ));
    let checked = check(&source);
    let [cycle] = checked.diagnostics.as_slice() else {
        panic!("{} diagnostics", checked.diagnostics.len());
    };
    assert_eq!(cycle.rule, "call-cycle");
    assert!(
        cycle.message.starts_with("flows `f0` → `f1` → `f2` → ")
            && cycle
                .message
                .ends_with(" → `f3000` → `order` → `f0` call one another"),
        "the search starts at the first flow by name: {}",
        &cycle.message[..80]
    );
    assert_eq!(
        cycle.line, 8,
        "on the call of `order`, which closes the cycle"
    );
}
