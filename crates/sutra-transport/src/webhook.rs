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
use sutra_core::model::Channel;
use sutra_store::{OutboxRow, SendError};

use crate::cloud_event::{self, cloud_event};

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
            .header(CONTENT_TYPE, cloud_event::CONTENT_TYPE)
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
