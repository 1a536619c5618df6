//! Answers across replicas (SPEC §5.3, decision 0024): a caller held here by `ack: complete` is
//! answered when a step on another replica ends its instance.
//!
//! The step that registered the caller recorded this replica as the instance's holder; the step
//! that ends the instance elsewhere read that from its claim and announced the end in its commit
//! ([`sutra_store::StepCommit::announce_end`]: on PostgreSQL one `NOTIFY` per group commit). Here
//! the announcements are heard ([`Store::end_notice`]), and for each ended instance a caller here
//! waits for, the outcome is read from the store and the callers are settled with the reply the
//! ending step gave ([`Reply::of_ended`]) — what they would have been told had it run here.
//!
//! A listener that (re)starts may have missed announcements, so every instance held here is
//! looked at then; nothing else can lose one, since an announcement is sent in the commit it
//! announces. A caller nobody answers is still answered at its `ack-timeout`, as one whose
//! instance goes on. Only on a store replicas share: on the embedded store every step runs in
//! the process that holds its callers.
//!
//! [`Store::end_notice`]: sutra_store::Steps::end_notice

use std::sync::Arc;

use sutra_core::step::Reply;
use sutra_store::{EndNotice, InstanceKey};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::shared::Shared;

/// The listener, on a store replicas share, until `shutdown` is set.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    shutdown: &watch::Sender<bool>,
) -> Option<JoinHandle<()>> {
    shared
        .store
        .shared_by_replicas()
        .then(|| tokio::spawn(listen(Arc::clone(shared), shutdown.subscribe())))
}

/// Hands each announcement's instances held here to [`answer`], on a task of its own so that
/// the next announcement is heard meanwhile. A failed wait may have missed one: the next wait,
/// a poll later, listens afresh and reports it, and every held instance is looked at then.
async fn listen(shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) {
    let pause = shared.config.lease_poll.unsigned_abs();
    loop {
        tokio::select! {
            notice = shared.store.end_notice() => {
                let held = match notice {
                    Ok(EndNotice::Ended(ids)) => shared.settle.held_among(&ids),
                    Ok(EndNotice::Listening) => shared.settle.holding(),
                    Err(error) => {
                        warn!(%error, "lost the end notices; listening again in a while");
                        tokio::select! {
                            () = shared.clock.sleep(pause) => {}
                            _ = shutdown.changed() => return,
                        }
                        continue;
                    }
                };
                if !held.is_empty() {
                    tokio::spawn(answer(Arc::clone(&shared), held));
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

/// Settles the callers of each of `held` that has ended, with the reply its ending step gave.
/// One that runs still (a notice for an instance restored since, or a look after a restart of
/// the listener) keeps its callers waiting.
async fn answer(shared: Arc<Shared>, held: Vec<InstanceKey>) {
    for key in held {
        match shared.store.instance(&key.tenant, &key.id).await {
            Ok(Some(record)) => {
                if let Some(reply) = Reply::of_ended(&record.snapshot) {
                    shared.settle.settle(&key.id, &reply);
                }
            }
            // Purged already: long past any caller's ack timeout.
            Ok(None) => {}
            Err(error) => warn!(
                %error,
                instance = %key.id,
                "could not read an ended instance; its callers are answered at their ack timeout"
            ),
        }
    }
}
