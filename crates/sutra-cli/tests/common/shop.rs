//! The rest of the language under chaos (issue 48), beside the transfers: an order calls a child
//! flow per box from a `for-each` of three, races a message no one sends against a timer, and
//! then undoes its booking through a compensation scope — a task and a `set` run as handlers —
//! while a schedule starts an instance every second. What an order must leave behind is
//! [`audit_orders`]'s; what its commits must show, the history checker's (`history.rs`, rules
//! (i)–(k)).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_client::{Task, TaskError};
use sutra_testkit::Server;
use tokio::task::JoinHandle;

use super::{Accepted, Paced};

/// Orders started per second of the window, beside the transfers: each is five instances (its
/// own and three children, one in two also a tick's) and six tasks.
pub const ORDERS_PER_SECOND: f64 = 2.0;

/// The boxes each order packs, one call each.
const BOXES: usize = 3;

/// The shop's deployment. `ticking`: the `tick` flow is started by a schedule every second;
/// otherwise by a channel no one sends on — the version that stops the ticks once the window
/// is over, so that the run can settle while orders of the first version drain.
pub fn shop(ticking: bool) -> String {
    let tick_start = if ticking {
        "{ schedule: { every: PT1S, overlap: allow } }"
    } else {
        "{ channel: ticks }"
    };
    format!(
        r#"
name: shop
channels:
  orders: {{ transport: http, correlate: data.id }}
  nudges: {{ transport: http, correlate: data.id }}
  ticks: {{ transport: http }}
flows:
  order:
    start: {{ channel: orders }}
    nodes:
      - id: booking
        scope:
          nodes:
            - id: reserve
              task: {{ topic: reserve-stock, input: {{ order: "= vars.input.id" }}, retries: 50, backoff: PT0.1S }}
              compensate-with: unreserve
            - id: pack
              for-each:
                items: "= [1, 2, 3]"
                call: {{ flow: packing, input: {{ order: "= vars.input.id", box: "= item" }} }}
              output: boxes
              compensate-with: unpack
            - id: settle
              race:
                - receive: {{ channel: nudges, key: vars.input.id }}
                - wait: {{ duration: PT0.2S }}
      - id: undo
        compensate: {{ scope: booking }}
      - id: done
        end: {{}}
      - id: unreserve
        task: {{ topic: unreserve-stock, input: {{ order: "= vars.input.id" }}, retries: 50, backoff: PT0.1S }}
      - id: unpack
        set: {{ unpacked: "= true" }}
  packing:
    nodes:
      - id: pack-box
        task: {{ topic: pack-box, input: {{ order: "= vars.input.order", box: "= vars.input.box" }}, retries: 50, backoff: PT0.1S }}
        output: packed
      - id: packed
        end: {{ reply: "= vars.packed" }}
  tick:
    start: {tick_start}
    nodes:
      - id: ticked
        end: {{}}
"#
    )
}

/// The shop's workers' handler for each of its topics: the task's input is its output.
pub async fn echo(task: Task<Value>) -> Result<Value, TaskError> {
    Ok(task.input)
}

/// Starts one sender per order over `window`, order `n` (`o{n}`) at `n / per_second` into it and
/// first to replica `n mod replicas`; each sends until accepted.
pub fn send_orders_paced(
    http: &reqwest::Client,
    urls: &[String],
    window: Duration,
    per_second: f64,
) -> Vec<JoinHandle<Accepted>> {
    let orders = Paced {
        channel: "orders",
        prefix: "o",
        data: |id| json!({"id": id}),
    };
    orders.send(http, urls, window, per_second)
}

/// Waits until every order has completed, and returns how long that took from `since`. Fails
/// the test, naming the orders still running, if that takes longer than `within`.
pub async fn wait_for_orders(
    server: &Server,
    orders: &[Accepted],
    since: Instant,
    within: Duration,
) -> Duration {
    loop {
        let mut running = Vec::new();
        for order in orders {
            let (status, instance) = server
                .get(&format!("/v1/instances/{}", order.instance))
                .await;
            if status != 200 || instance["status"] != "completed" {
                running.push(format!("{} ({})", order.instance, instance["status"]));
            }
        }
        if running.is_empty() {
            return since.elapsed();
        }
        assert!(
            since.elapsed() < within,
            "{} orders still not completed {within:?} after the last fault: {running:?}",
            running.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every order completed once through the whole language: its three children called and
/// completed, their replies collected in box order, and each of its two completions in the
/// scope compensated exactly once.
pub async fn audit_orders(server: &Server, orders: &[Accepted]) {
    for order in orders {
        let id = &order.instance;
        let (status, instance) = server.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(status, 200, "{instance}");
        let boxes: Vec<&Value> = (instance["vars"]["boxes"].as_array().into_iter().flatten())
            .map(|reply| &reply["box"])
            .collect();
        assert_eq!(
            (&instance["status"], boxes, &instance["vars"]["unpacked"]),
            (
                &json!("completed"),
                vec![&json!(1), &json!(2), &json!(3)],
                &json!(true)
            ),
            "{instance}"
        );
        let history = server.history(id).await;
        let compensated: Vec<&Value> = (history.iter())
            .filter(|event| event["kind"] == "compensated")
            .map(|event| &event["detail"]["undoes"])
            .collect();
        assert_eq!(compensated, [&json!("pack"), &json!("reserve")], "{id}");
        let (status, children) = server.get(&format!("/v1/instances?parent={id}")).await;
        assert_eq!(status, 200, "{children}");
        let children = children["items"].as_array().cloned().unwrap_or_default();
        let completed = (children.iter())
            .filter(|child| child["status"] == "completed" && child["flow"] == "packing")
            .count();
        assert_eq!(
            (children.len(), completed),
            (BOXES, BOXES),
            "{id}: {children:?}"
        );
    }
}
