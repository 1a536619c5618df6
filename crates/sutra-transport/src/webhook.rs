//! HTTP webhooks: an outbox row POSTed to its channel's `url` as a CloudEvents 1.0 event in
//! structured mode (`application/cloudevents+json`), the mode that carries every attribute in
//! the body, so a receiver needs no header mapping to read it.
//!
//! The row's idempotency key (`{instance}:{audit seq}:{node}`) rides twice, and is the same on
//! every attempt: as the event's `id` (CloudEvents: `source` + `id` identify an event, which is
//! what CloudEvents consumers deduplicate on) and as the `Idempotency-Key` header (what plain
//! HTTP endpoints deduplicate on).
//!
//! Only a 2xx answer counts as sent. Redirects are not followed: following one would resend the
//! event to an address nobody configured, and a 301/302 would turn the POST into a GET. Plain
//! `http://` only for now: the client is built without TLS, so an `https://` url fails its sends
//! with a reason that says so.

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use serde_json::{Value, json};
use sutra_core::model::Channel;
use sutra_store::{OutboxRow, SendError};

/// How long a receiver has to answer. Far below the claim timeout after which another replica
/// would take the row over and send it again.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Webhook {
    client: reqwest::Client,
}

impl Webhook {
    pub fn new() -> Result<Webhook, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Webhook { client })
    }

    pub async fn send(&self, channel: &Channel, row: &OutboxRow) -> Result<(), SendError> {
        // The checker refuses an `emit` to an http channel without a url; a row can only lack
        // one if its deployment was edited by hand.
        let url = channel
            .url
            .as_deref()
            .ok_or_else(|| SendError(format!("http channel `{}` has no url", channel.name)))?;
        let response = self
            .client
            .post(url)
            .header(CONTENT_TYPE, "application/cloudevents+json")
            .header("idempotency-key", &row.entry.idempotency_key)
            .body(cloud_event(row).to_string())
            .send()
            .await
            .map_err(|error| SendError(format!("POST {url}: {}", describe(&error))))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(SendError(format!("POST {url}: HTTP {status}")))
        }
    }
}

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

/// A few words for the row's `last_error`: reqwest's own message names the url again and hides
/// the cause (`connection refused`) at the bottom of its source chain.
fn describe(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return format!("no answer within {}s", REQUEST_TIMEOUT.as_secs());
    }
    let mut cause: &dyn std::error::Error = error;
    while let Some(source) = cause.source() {
        cause = source;
    }
    if error.is_connect() {
        format!("cannot connect: {cause}")
    } else {
        cause.to_string()
    }
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
