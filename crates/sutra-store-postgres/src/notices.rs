//! Notices between replicas, each sent with `pg_notify` inside the transaction whose commit it
//! announces, so that it is delivered only if that commit lands:
//!
//! - deployment notices (SPEC §6) on [`DEPLOYMENTS`]: a deploy notifies, so every other replica
//!   hears of the new version the moment it is visible and loads it without waiting for its next
//!   poll of the revision;
//! - end notices (decision 0024) on [`ENDED`]: a commit whose steps end instances held by a caller
//!   on another replica names them, so the holder answers its callers at once.
//!
//! Each channel has a listener of its own, on a connection of its own outside the pool: it holds
//! it for as long as the replica runs, and must not take a slot that steps need. Two listeners
//! rather than one demultiplexed: each already reports its own reconnection to its own reader
//! (below), a burst of end notices never delays a deployment notice behind it, and neither reader
//! needs a task of its own to pass notices on; the price is a second idle connection per replica.
//!
//! sqlx's `PgListener` reconnects and LISTENs again by itself after the connection drops; notices
//! sent meanwhile are lost, so a reconnection is reported as [`Heard::Listening`] (the engine then
//! looks at the revision, or at every instance a caller waits for), as is the `LISTEN` of a fresh
//! listener, and an error drops the listener for a fresh one on the next call.

use std::sync::Arc;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sutra_store::{EndNotice, Result};
use tokio::sync::Mutex;

use crate::codec::db;
use crate::failover::Failover;

/// The channel deploys notify on.
pub const DEPLOYMENTS: &str = "sutra_deployments";

/// The channel commits ending instances held elsewhere notify on.
pub const ENDED: &str = "sutra_ended";

/// The longest payload sent: PostgreSQL refuses one of 8000 bytes or more, and a refused
/// `NOTIFY` would fail the commit it rides in.
const MAX_PAYLOAD: usize = 7900;

/// What a listener heard.
pub enum Heard {
    /// A notice and its payload.
    Notice(String),
    /// The listener (re)started: notices sent before it listened were not heard.
    Listening,
}

/// A listener on one channel.
pub struct Notices {
    channel: &'static str,
    /// One connection at most, opened when the listener first listens.
    connection: PgPool,
    listener: Mutex<Option<PgListener>>,
}

impl Notices {
    /// A listener on `channel`, connecting as `options` say; after a failover (`switches`) its
    /// connection to the old primary is dropped and it listens again on the new one.
    pub fn new(
        options: PgConnectOptions,
        channel: &'static str,
        switches: &Option<Arc<Failover>>,
    ) -> Notices {
        let switches = switches.clone();
        let connection = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .before_acquire(move |_, metadata| {
                let stale = (switches.as_ref()).is_some_and(|f| f.predates_switch(metadata.age));
                Box::pin(async move { Ok(!stale) })
            })
            .connect_lazy_with(options);
        Notices {
            channel,
            connection,
            listener: Mutex::new(None),
        }
    }

    /// The pool the listener's connection comes from, for the failover watcher to point.
    pub fn pool(&self) -> PgPool {
        self.connection.clone()
    }

    /// Waits for the next notice. With no listener up it listens and returns at once: what was
    /// sent before the `LISTEN` was never heard here.
    pub async fn next(&self) -> Result<Heard> {
        let mut listener = self.listener.lock().await;
        let Some(listening) = listener.as_mut() else {
            *listener = Some(self.listen().await?);
            return Ok(Heard::Listening);
        };
        match listening.try_recv().await {
            Ok(Some(notice)) => Ok(Heard::Notice(notice.payload().to_owned())),
            // The connection dropped and was remade; what was sent meanwhile is lost.
            Ok(None) => Ok(Heard::Listening),
            Err(error) => {
                *listener = None;
                Err(db(error))
            }
        }
    }

    async fn listen(&self) -> Result<PgListener> {
        let mut listener = PgListener::connect_with(&self.connection)
            .await
            .map_err(db)?;
        listener.listen(self.channel).await.map_err(db)?;
        Ok(listener)
    }
}

/// The payloads announcing that `instances` ended: each a JSON array of ids, as few as fit under
/// PostgreSQL's limit. An id too long to fit any payload is left out (instance ids are UUIDs,
/// so none is): its callers are answered at their ack timeout instead.
pub fn ended_payloads(instances: &[String]) -> Vec<String> {
    let mut payloads = Vec::new();
    let mut batch: Vec<&str> = Vec::new();
    let mut size = 2;
    for id in instances {
        // The id, its quotes and a comma; ids need no escaping, but are measured as encoded.
        let encoded = serde_json::to_string(id).map_or(usize::MAX, |text| text.len() + 1);
        if encoded > MAX_PAYLOAD - 2 {
            continue;
        }
        if size + encoded > MAX_PAYLOAD {
            payloads.push(encode(&batch));
            batch.clear();
            size = 2;
        }
        batch.push(id);
        size += encoded;
    }
    if !batch.is_empty() {
        payloads.push(encode(&batch));
    }
    payloads
}

fn encode(batch: &[&str]) -> String {
    serde_json::to_string(batch).unwrap_or_default()
}

/// What an end notice's payload names, or `None` if it is not one [`ended_payloads`] makes.
pub fn ended(payload: &str) -> Option<EndNotice> {
    serde_json::from_str(payload).ok().map(EndNotice::Ended)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: usize) -> String {
        format!("0190d3a1-7c4e-7000-8000-{n:012}")
    }

    #[test]
    fn every_payload_fits_and_together_they_name_every_instance_once() {
        let instances: Vec<String> = (0..1000).map(id).collect();
        let payloads = ended_payloads(&instances);
        assert!(payloads.len() > 1, "1000 ids do not fit one payload");
        let mut named = Vec::new();
        for payload in &payloads {
            assert!(payload.len() < 8000, "{} bytes", payload.len());
            let Some(EndNotice::Ended(ids)) = ended(payload) else {
                panic!("not a payload `ended` reads: {payload}");
            };
            named.extend(ids);
        }
        assert_eq!(named, instances);
    }

    #[test]
    fn a_few_instances_are_one_payload() {
        let instances = vec![id(1), id(2)];
        assert_eq!(ended_payloads(&instances).len(), 1);
        assert!(ended_payloads(&[]).is_empty());
    }

    #[test]
    fn a_malformed_payload_names_nothing() {
        assert_eq!(ended("not json"), None);
        assert_eq!(ended("{\"ids\": 1}"), None);
        assert_eq!(ended(""), None);
    }
}
