//! The stuck-instance sweep, the loop of lease role `instance-sweeper` (SPEC §5.2, §6): it runs
//! only while this replica leads the role ([`crate::leadership`]).
//!
//! A durable claim whose holder died is cleared once it has lapsed (one claim timeout); an
//! instance cleared `max_recoveries` sweeps in a row is failed as poisoned through the
//! administrative executor ([`crate::admin`]). No production path takes a durable claim any
//! more (decision 0024): every step, administrative ones and poisoning included, claims with its
//! transaction's row lock, which a holder's death ends with the transaction — so a replica killed
//! mid-step leaves this sweep nothing to clear, and a step that keeps killing its replica is
//! poisoned by its delivery's dispatch count (`deliveries`), not here (decision 0048). What every
//! sweep does in practice is wake the delivery dispatcher, whose pass is `recover`: the rows the
//! dead holders were asked are taken now. The sweep is owner-blind, judges by the store's clock
//! and is idempotent: one cut short simply runs again (SPEC §5.2).

use std::sync::Arc;

use sutra_core::codes;
use tracing::{info, warn};

use crate::admin::Admin;
use crate::error::Error;
use crate::leadership::{INSTANCE_SWEEPER, RoleLoops};
use crate::metrics;
use crate::shared::Shared;

/// The role loop of `instance-sweeper`.
pub(crate) fn spawn(roles: &RoleLoops, shared: &Arc<Shared>, admin: &Arc<Admin>) {
    let sweeper = Arc::new(Sweeper {
        shared: Arc::clone(shared),
        admin: Arc::clone(admin),
    });
    roles.spawn(INSTANCE_SWEEPER, move || sweep_loop(Arc::clone(&sweeper)));
}

struct Sweeper {
    shared: Arc<Shared>,
    /// Fails the poisoned instances, one administrative step each.
    admin: Arc<Admin>,
}

async fn sweep_loop(sweeper: Arc<Sweeper>) {
    let interval = sweeper.shared.config.sweep_interval.unsigned_abs();
    loop {
        sweeper.shared.clock.sleep(interval).await;
        if let Err(error) = sweeper.sweep().await {
            // Idempotent: the next interval simply sweeps again.
            warn!(%error, "stuck-instance sweep failed; it runs again next interval");
        }
    }
}

impl Sweeper {
    /// Clears lapsed durable claims (none, unless one was taken outside the engine's steps),
    /// fails the instances they poisoned, then runs `recover`.
    async fn sweep(&self) -> Result<(), Error> {
        let config = &self.shared.config;
        let outcome = self
            .shared
            .store
            .sweep(config.claim_timeout, config.max_recoveries)
            .await?;
        metrics::sweeps_cleared(outcome.cleared);
        if outcome.cleared > 0 {
            info!(
                cleared = outcome.cleared,
                "stuck-instance sweep cleared lapsed claims"
            );
        }
        let detail = format!(
            "the instance's step died with its replica {} times in a row",
            config.max_recoveries
        );
        for key in &outcome.poisoned {
            match self.admin.poison(key, codes::STEP_POISONED, &detail).await {
                Ok(()) => {
                    warn!(instance = %key.id, "instance failed as poisoned: its steps keep dying")
                }
                Err(error) => {
                    warn!(instance = %key.id, %error, "could not fail a poisoned instance; next sweep retries")
                }
            }
        }
        self.shared.deliveries_due.notify_one();
        Ok(())
    }
}
