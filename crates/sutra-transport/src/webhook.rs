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
//! event to an address nobody configured, and a 301/302 would turn the POST into a GET.
//!
//! `https://` urls are verified against the platform's roots (rustls, on ring) and, when
//! `sutra.transports.http.ca-file` names one, the certificates of that PEM bundle too: what an
//! internal service signed by a private CA needs. A certificate no root vouches for fails the
//! send with a reason that says so.

use std::path::Path;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

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
    /// A client trusting the platform's roots, and those of the PEM bundle `extra_roots`.
    pub fn new(extra_roots: Option<&Path>) -> Result<Webhook, String> {
        let client = reqwest::Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .use_preconfigured_tls(tls(extra_roots)?)
            .build()
            .map_err(|e| e.to_string())?;
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

/// The TLS the webhooks speak: rustls on ring, with the platform's roots and `extra_roots`. Made
/// here rather than by reqwest, so that it names its crypto provider instead of relying on one
/// installed process-wide.
fn tls(extra_roots: Option<&Path>) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    // A root of the platform's that rustls cannot read is left out, as every client does.
    let (_added, _unreadable) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if let Some(path) = extra_roots {
        let pem = std::fs::read(path)
            .map_err(|e| format!("cannot read the CA bundle {}: {e}", path.display()))?;
        let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| {
                format!(
                    "{} is not a PEM bundle of certificates: {e}",
                    path.display()
                )
            })?;
        if certs.is_empty() {
            return Err(format!("{} holds no certificate", path.display()));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("a certificate of {}: {e}", path.display()))?;
        }
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth())
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
