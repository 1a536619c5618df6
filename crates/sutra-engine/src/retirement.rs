//! The retirement gate (SPEC §7.3), the loop of lease role `retirement-gate`: a draining version
//! retires once no unended instance is pinned to it (suspended or failed), no outbox row it
//! minted is pending (sent and poisoned rows do not count) and no task of its instances is
//! available or locked.
//!
//! The three legs and the retirement are one statement per version in the store, so nothing
//! slips in between the check and the write; the counts are the database's, the same from every
//! replica. A version is retired only once its successor has been stored for a claim timeout: a
//! replica that has not loaded the successor yet may still start an instance on it, and by then
//! every replica has loaded it (convergence takes a lease poll) and any step begun before has
//! committed or died. A retired version stays loaded where it is loaded until that replica
//! restarts — no instance can need it — and is no longer loaded by a starting one.

use std::sync::Arc;

use tracing::{info, warn};

use crate::leadership::{RETIREMENT_GATE, RoleLoops};
use crate::shared::Shared;

/// The role loop of `retirement-gate`.
pub(crate) fn spawn(roles: &RoleLoops, shared: &Arc<Shared>) {
    let gate = Arc::clone(shared);
    roles.spawn(RETIREMENT_GATE, move || gate_loop(Arc::clone(&gate)));
}

/// Looks at once when a term starts, then every `retire_interval`.
async fn gate_loop(shared: Arc<Shared>) {
    let interval = shared.config.retire_interval.unsigned_abs();
    loop {
        retire(&shared).await;
        shared.clock.sleep(interval).await;
    }
}

async fn retire(shared: &Shared) {
    match shared
        .store
        .retire_drained(shared.config.claim_timeout)
        .await
    {
        Ok(retired) => {
            for record in retired {
                info!(
                    tenant = record.tenant,
                    deployment = record.name,
                    version = record.version,
                    "retired: nothing keeps the draining version any more"
                );
            }
        }
        Err(error) => warn!(%error, "the retirement gate failed; it looks again next interval"),
    }
}
