//! The repair story's two versions, which `migration.rs` and `bulk.rs` share: version 1 fails an
//! order whose amount is not a number, version 2 renames its nodes and fixes it.

/// Version 1 prices an order by doubling its amount — which fails on an amount that is not a
/// number — then waits for its reply, keyed by the order's id.
pub const V1: &str = r#"
name: repair
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: price
        set: { total: "= vars.input.amount * 2" }
      - id: wait
        receive: { channel: replies, key: vars.input.id }
      - id: done
        end: { reply: { total: "= vars.total" } }
"#;

/// Version 2 renames both nodes: `reprice` cannot fail, and `await-reply` keys the reply by
/// `ref-{id}`.
pub const V2: &str = r#"
name: repair
channels:
  orders: { transport: http, correlate: data.id }
  replies: { transport: http, correlate: data.id }
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: reprice
        set: { total: 10 }
      - id: await-reply
        receive: { channel: replies, key: "'ref-' + vars.input.id" }
      - id: done
        end: { reply: { total: "= vars.total" } }
"#;

/// The CLI's flags that migrate onto version 2, mapping each renamed node to its new name.
pub const ONTO_V2: [&str; 6] = [
    "--to-version",
    "2",
    "--map",
    "price=reprice",
    "--map",
    "wait=await-reply",
];
