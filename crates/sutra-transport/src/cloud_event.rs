//! The CloudEvents 1.0 event an outbox row leaves as, on every transport: structured mode
//! (`application/cloudevents+json`), the mode that carries every attribute in the body, so a
//! receiver needs no header mapping to read it.

use serde_json::{Value, json};
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
