//! The history purger (SPEC §3 `sutra.history.retention`), the loop of lease role
//! `history-purger`: it deletes terminal instances past the retention, with everything that hangs
//! off them, and expired buffered messages and long-sent outbox rows. `failed` instances are
//! never purged: they wait for an operator (SPEC §7.2).
//!
//! It runs while this replica leads the role, one bounded batch per transaction so that no purge
//! holds locks or a connection for long, and batch after batch until one leaves every kind of
//! row unfilled. Deleting by the store's clock and batch by batch, it is idempotent: a purge cut
//! short by the term's end, a crash or a database going away is simply finished by the next.

use std::sync::Arc;

use tracing::{info, warn};

use crate::leadership::{HISTORY_PURGER, RoleLoops};
use crate::shared::Shared;

/// The most rows of each kind one purge transaction deletes.
const BATCH: u32 = 500;

/// The role loop of `history-purger`.
pub(crate) fn spawn(roles: &RoleLoops, shared: &Arc<Shared>) {
    let purger = Arc::clone(shared);
    roles.spawn(HISTORY_PURGER, move || purge_loop(Arc::clone(&purger)));
}

/// Purges at once when a term starts — a new leader catches up right away — then every
/// `purge_interval`.
async fn purge_loop(shared: Arc<Shared>) {
    let interval = shared.config.purge_interval.unsigned_abs();
    loop {
        purge_history(&shared).await;
        shared.clock.sleep(interval).await;
    }
}

async fn purge_history(shared: &Shared) {
    let retention = shared.config.history_retention;
    loop {
        match shared.store.purge(retention, BATCH).await {
            Ok(purged) => {
                if purged != sutra_store::Purged::default() {
                    info!(
                        instances = purged.instances,
                        buffered = purged.buffered,
                        outbox = purged.outbox,
                        "purged history past the retention"
                    );
                }
                if !purged.filled(BATCH) {
                    return;
                }
            }
            Err(error) => {
                warn!(%error, "history purge failed; it runs again next interval");
                return;
            }
        }
    }
}
