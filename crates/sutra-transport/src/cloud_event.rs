//! CloudEvents 1.0 on every transport, both ways.
//!
//! Out: an outbox row leaves in structured mode (`application/cloudevents+json`), the mode that
//! carries every attribute in the body, so a receiver needs no header mapping to read it.
//!
//! In: a message arrives in structured mode (the event is the JSON body) or binary mode (the
//! attributes are headers — `ce-id` over HTTP and NATS, `cloudEvents:id` or `ce-id` over AMQP —
//! and the body is `data`). Each transport says how to read an attribute's header; the rules
//! that decode an event are the core's ([`sutra_core::cloud_event`], re-exported here), pure so
//! that they are fuzzed without a broker client (decision 0042).

use serde_json::{Value, json};
pub use sutra_core::cloud_event::{binary, decode, structured};
use sutra_store::OutboxRow;

/// The media type of a structured-mode event.
pub const CONTENT_TYPE: &str = "application/cloudevents+json";

/// The CloudEvents 1.0 structured-mode body of a row. The emit's `key`, when it has one, is the
/// `partitionkey` of the CloudEvents partitioning extension.
pub fn cloud_event(row: &OutboxRow) -> Value {
    let mut event = json!({
        "specversion": "1.0",
        "id": row.entry.idempotency_key,
        "type": format!("sutra.{}.{}", row.deployment, row.entry.channel),
        "source": format!("sutra://{}/{}/{}", row.tenant, row.deployment, row.version),
        "subject": row.instance,
        "datacontenttype": "application/json",
        "data": row.entry.payload,
    });
    if let Some(key) = &row.entry.message_key {
        event["partitionkey"] = json!(key);
    }
    event
}

#[cfg(test)]
mod tests {
    use sutra_store::{OutboxEntry, OutboxId};

    use super::*;

    fn row(message_key: Option<&str>) -> OutboxRow {
        OutboxRow {
            id: OutboxId(7),
            tenant: "acme".to_owned(),
            instance: "0190c0de-0000-7000-8000-000000000001".to_owned(),
            deployment: "payments".to_owned(),
            version: 3,
            entry: OutboxEntry {
                channel: "ledger".to_owned(),
                payload: json!({ "transfer": "t-1", "status": "ok" }),
                message_key: message_key.map(str::to_owned),
                idempotency_key: "0190c0de-0000-7000-8000-000000000001:4:notify".to_owned(),
            },
            attempts: 2,
        }
    }

    #[test]
    fn the_event_is_identified_by_the_idempotency_key_and_addressed_by_its_version() {
        assert_eq!(
            cloud_event(&row(None)),
            json!({
                "specversion": "1.0",
                "id": "0190c0de-0000-7000-8000-000000000001:4:notify",
                "type": "sutra.payments.ledger",
                "source": "sutra://acme/payments/3",
                "subject": "0190c0de-0000-7000-8000-000000000001",
                "datacontenttype": "application/json",
                "data": { "transfer": "t-1", "status": "ok" },
            })
        );
    }

    #[test]
    fn the_emits_key_is_the_partition_key() {
        assert_eq!(cloud_event(&row(Some("t-1")))["partitionkey"], "t-1");
    }
}
