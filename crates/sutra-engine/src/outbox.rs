//! The outbox worker (SPEC §5.4): every replica runs one. A step writes its `emit`s as outbox
//! rows in its own transaction; this loop sends them after the commit.
//!
//! It claims a batch, sends each row as the deployment version that minted it defines the
//! channel (a draining version's channels still send), and marks it sent — or failed, backing
//! off, and poisoned past the channel's `max-attempts`. A commit that wrote rows wakes it at once;
//! a bounded poll is the backstop for rows written by other replicas and for retries.
//!
//! Delivery is at least once. A sender that dies between a send and its mark leaves the row
//! claimed; the claim goes stale after the claim timeout and whoever scans next sends the row
//! again, with the same idempotency key, which is what receivers deduplicate on.
//!
//! The engine knows no transport: the server hands `Engine::start` a [`Sender`].

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
// The seam the server's transports implement, kept where its row is: in the store seam.
use sutra_store::{OutboxRetry, OutboxRow};
pub use sutra_store::{SendError, Sender};
use tokio::sync::watch;
use tracing::{debug, warn};

use crate::error::Error;
use crate::registry::{Current, Live};
use crate::shared::Shared;
use crate::{fault, history_log};

/// The longest a failing row waits between two attempts, however many it has failed.
pub const BACKOFF_CAP: SignedDuration = SignedDuration::from_mins(5);

/// The outbox worker, until `shutdown` is set.
pub(crate) fn spawn(
    shared: Arc<Shared>,
    live: Arc<Current>,
    sender: Arc<dyn Sender>,
    shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let worker = Worker {
        shared,
        live,
        sender,
    };
    tokio::spawn(send_loop(worker, shutdown))
}

struct Worker {
    shared: Arc<Shared>,
    /// Which deployment version defines each row's channel.
    live: Arc<Current>,
    /// The server's transports, through which the worker sends.
    sender: Arc<dyn Sender>,
}

/// Runs until shutdown. A pass in progress finishes first (each send is bounded by its
/// transport's timeout), so that a shutdown does not cut a send off before its mark. A wake-up
/// sent during a pass is kept by `Notify` as a permit, so none is lost.
async fn send_loop(worker: Worker, mut shutdown: watch::Receiver<bool>) {
    loop {
        let pause = match worker.send_due().await {
            Ok(pause) => pause,
            Err(error) => {
                warn!(%error, "could not claim outbox rows; retrying");
                worker.shared.config.outbox_poll
            }
        };
        if pause.is_zero() {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(pause.unsigned_abs()) => {}
            _ = worker.shared.outbox_due.notified() => {}
            _ = shutdown.changed() => return,
        }
    }
}

impl Worker {
    /// Sends one batch; returns how long to rest before the next: not at all after a full
    /// batch, else until the earliest retry this pass scheduled, at most one poll.
    async fn send_due(&self) -> Result<SignedDuration, Error> {
        let config = &self.shared.config;
        let rows = self
            .shared
            .store
            .claim_outbox(config.outbox_batch, config.claim_timeout)
            .await?;
        let full = rows.len() as u32 == config.outbox_batch;
        let live = self.live.get();
        let sends = rows.iter().map(|row| self.send_row(&live, row));
        let retries = futures_util::future::join_all(sends).await;
        if full {
            return Ok(SignedDuration::ZERO);
        }
        let rest = match retries.into_iter().flatten().min() {
            Some(retry) => retry.duration_since(Timestamp::now()),
            None => config.outbox_poll,
        };
        Ok(rest.clamp(SignedDuration::from_millis(1), config.outbox_poll))
    }

    /// Sends one claimed row and records the outcome; returns when it is due again, if it is.
    async fn send_row(&self, live: &Live, row: &OutboxRow) -> Option<Timestamp> {
        let entry = &row.entry;
        let channel = live.channel(&row.tenant, &row.deployment, row.version, &entry.channel);
        let sent = match channel {
            Some(channel) => self.sender.send(channel, row).await,
            None => Err(SendError(format!(
                "channel `{}` of {}/{} version {} is not loaded on this replica",
                entry.channel, row.tenant, row.deployment, row.version
            ))),
        };
        match sent {
            Ok(()) => {
                self.record_sent(row).await;
                None
            }
            Err(error) => {
                let max_attempts = channel.and_then(|channel| channel.max_attempts);
                self.record_failure(row, max_attempts, &error).await
            }
        }
    }

    async fn record_sent(&self, row: &OutboxRow) {
        fault::point("after-send");
        let key = &row.entry.idempotency_key;
        debug!(%key, "outbox row sent");
        history_log::sent(&self.shared.config.replica_id, &row.instance, key);
        unrecorded(self.shared.store.outbox_sent(row.id).await, key);
    }

    /// Backs the row off, or poisons it; returns when it is due again, if it is.
    async fn record_failure(
        &self,
        row: &OutboxRow,
        max_attempts: Option<u32>,
        error: &SendError,
    ) -> Option<Timestamp> {
        let key = &row.entry.idempotency_key;
        let backoff = self.shared.config.outbox_backoff;
        let retry = after_failure(row.attempts + 1, max_attempts, backoff, Timestamp::now());
        let due_again = match retry {
            OutboxRetry::At(at) => {
                warn!(%key, %error, next_attempt_at = %at, "outbox send failed; backing off");
                Some(at)
            }
            OutboxRetry::Poison => {
                warn!(%key, %error, "outbox send failed past max-attempts; the row is poisoned");
                None
            }
        };
        unrecorded(
            self.shared
                .store
                .outbox_failed(row.id, &error.0, retry)
                .await,
            key,
        );
        due_again
    }
}

/// An outcome the store did not take leaves the row claimed: its claim goes stale and the row is
/// sent again, under the same key.
fn unrecorded(marked: sutra_store::Result<()>, key: &str) {
    if let Err(error) = marked {
        warn!(%key, %error, "could not record an outbox send; the row will be sent again");
    }
}

/// What follows the `attempt`-th failed send of a row (counting from 1): poisoned once it
/// reaches `max_attempts`, else sent again after `first`, doubled per earlier failure, capped at
/// [`BACKOFF_CAP`].
fn after_failure(
    attempt: u32,
    max_attempts: Option<u32>,
    first: SignedDuration,
    now: Timestamp,
) -> OutboxRetry {
    if max_attempts.is_some_and(|max| attempt >= max) {
        return OutboxRetry::Poison;
    }
    let doublings = attempt.saturating_sub(1).min(20);
    let delay = first.saturating_mul(1 << doublings).min(BACKOFF_CAP);
    OutboxRetry::At(now.saturating_add(delay).unwrap_or(Timestamp::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: SignedDuration = SignedDuration::from_secs(1);

    fn delay(attempt: u32, max_attempts: Option<u32>) -> Option<SignedDuration> {
        let now = Timestamp::UNIX_EPOCH;
        match after_failure(attempt, max_attempts, SECOND, now) {
            OutboxRetry::At(at) => Some(at.duration_since(now)),
            OutboxRetry::Poison => None,
        }
    }

    #[test]
    fn backoff_doubles_from_the_first_delay_up_to_the_cap() {
        let delays: Vec<_> = [1, 2, 3, 4, 9, 10, 1000]
            .into_iter()
            .map(|attempt| delay(attempt, None))
            .collect();
        let secs = |s| Some(SignedDuration::from_secs(s));
        assert_eq!(
            delays,
            [
                secs(1),
                secs(2),
                secs(4),
                secs(8),
                secs(256),
                Some(BACKOFF_CAP),
                Some(BACKOFF_CAP)
            ]
        );
    }

    #[test]
    fn a_row_is_poisoned_once_it_reaches_max_attempts() {
        assert_eq!(delay(2, Some(3)), Some(SECOND * 2));
        assert_eq!(delay(3, Some(3)), None);
        assert_eq!(delay(1, Some(1)), None, "one attempt, no retry");
    }

    #[test]
    fn without_max_attempts_a_row_is_retried_forever() {
        assert_eq!(delay(u32::MAX, None), Some(BACKOFF_CAP));
    }
}
