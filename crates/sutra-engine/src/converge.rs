//! Deployment convergence (SPEC §6, §7.1): a version deployed through any replica is live on
//! every replica within one `lease.poll`.
//!
//! Two paths lead to the same check. The store's notices ([`Store::deployment_notice`]:
//! PostgreSQL's `LISTEN/NOTIFY`, sent in the deploy's own transaction) wake it at once; a poll of
//! the store's deployment revision every `lease.poll` is the backstop for notices lost while the
//! listener reconnected, and the only path on SQLite, where a second process on the same file
//! converges the same way. When the revision moved, every stored version this replica has not
//! loaded is activated through [`Deployments::load_missing`], the path its own deploys take —
//! every lane flips before intake routes by it.
//!
//! [`Store::deployment_notice`]: sutra_store::Store::deployment_notice

use std::sync::Arc;

use tokio::sync::{Notify, watch};
use tracing::warn;

use crate::deploy::Deployments;
use crate::error::Error;
use crate::shared::Shared;

/// The notice listener and the poll loop, until `shutdown` is set.
pub(crate) fn spawn(
    shared: &Arc<Shared>,
    deployments: &Arc<Deployments>,
    shutdown: &watch::Sender<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let noticed = Arc::new(Notify::new());
    vec![
        tokio::spawn(listen(
            Arc::clone(shared),
            Arc::clone(&noticed),
            shutdown.subscribe(),
        )),
        tokio::spawn(poll(
            Arc::clone(shared),
            Arc::clone(deployments),
            noticed,
            shutdown.subscribe(),
        )),
    ]
}

/// Passes the store's notices on to [`poll`]. A failed wait may have missed one, so it is passed
/// on too, and the next wait comes a poll later: a database that is away is not asked in a loop.
async fn listen(shared: Arc<Shared>, noticed: Arc<Notify>, mut shutdown: watch::Receiver<bool>) {
    let pause = shared.config.lease_poll.unsigned_abs();
    loop {
        tokio::select! {
            notice = shared.store.deployment_notice() => {
                noticed.notify_one();
                if let Err(error) = notice {
                    warn!(%error, "lost the deployment notices; polling until they are back");
                    tokio::select! {
                        () = shared.clock.sleep(pause) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

async fn poll(
    shared: Arc<Shared>,
    deployments: Arc<Deployments>,
    noticed: Arc<Notify>,
    mut shutdown: watch::Receiver<bool>,
) {
    let interval = shared.config.lease_poll.unsigned_abs();
    let mut loaded = None;
    loop {
        tokio::select! {
            () = shared.clock.sleep(interval) => {}
            () = noticed.notified() => {}
            _ = shutdown.changed() => return,
        }
        match converge(&shared, &deployments, loaded).await {
            Ok(revision) => loaded = Some(revision),
            Err(error) => warn!(%error, "could not load deployments made elsewhere; retrying"),
        }
    }
}

/// Activates every stored version not loaded here, if the store's revision moved since
/// `loaded`; returns the revision acted on. The revision is read first, so a deploy that commits
/// meanwhile is either loaded now or moves the revision again.
async fn converge(
    shared: &Shared,
    deployments: &Deployments,
    loaded: Option<u64>,
) -> Result<u64, Error> {
    let revision = shared.store.deployment_revision().await?;
    if loaded == Some(revision) {
        return Ok(revision);
    }
    deployments.load_missing().await?;
    Ok(revision)
}
