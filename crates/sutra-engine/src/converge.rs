//! Deployment convergence (SPEC §6, §7.1): a version deployed through any replica is live on
//! every replica within one `lease.poll`.
//!
//! Two paths lead to the same check. The store's notices ([`Store::deployment_notice`]:
//! PostgreSQL's `LISTEN/NOTIFY`, sent in the deploy's own transaction) wake it at once; a poll of
//! the store's deployment revision every `lease.poll` is the backstop for notices lost while the
//! listener reconnected, and the only path on SQLite, where a second process on the same file
//! converges the same way. When the revision moved, every stored version this replica has not
//! loaded is activated through [`Engine::activate`], the path its own deploys take — every lane
//! flips before intake routes by it.
//!
//! [`Store::deployment_notice`]: sutra_store::Store::deployment_notice

use std::sync::Arc;

use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use crate::{Engine, Error, loadable};

/// The notice listener and the poll loop.
pub(crate) fn spawn(engine: &Arc<Engine>) -> Vec<tokio::task::JoinHandle<()>> {
    let noticed = Arc::new(Notify::new());
    vec![
        tokio::spawn(listen(
            Arc::clone(engine),
            Arc::clone(&noticed),
            engine.shutdown_signal(),
        )),
        tokio::spawn(poll(Arc::clone(engine), noticed, engine.shutdown_signal())),
    ]
}

/// Passes the store's notices on to [`poll`]. A failed wait may have missed one, so it is passed
/// on too, and the next wait comes a poll later: a database that is away is not asked in a loop.
async fn listen(engine: Arc<Engine>, noticed: Arc<Notify>, mut shutdown: watch::Receiver<bool>) {
    let pause = engine.config().lease_poll.unsigned_abs();
    loop {
        tokio::select! {
            notice = engine.store().deployment_notice() => {
                noticed.notify_one();
                if let Err(error) = notice {
                    warn!(%error, "lost the deployment notices; polling until they are back");
                    tokio::select! {
                        () = tokio::time::sleep(pause) => {}
                        _ = shutdown.changed() => return,
                    }
                }
            }
            _ = shutdown.changed() => return,
        }
    }
}

async fn poll(engine: Arc<Engine>, noticed: Arc<Notify>, mut shutdown: watch::Receiver<bool>) {
    let interval = engine.config().lease_poll.unsigned_abs();
    let mut loaded = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = noticed.notified() => {}
            _ = shutdown.changed() => return,
        }
        match engine.converge(loaded).await {
            Ok(revision) => loaded = Some(revision),
            Err(error) => warn!(%error, "could not load deployments made elsewhere; retrying"),
        }
    }
}

impl Engine {
    /// Activates every stored version not loaded here, if the store's revision moved since
    /// `loaded`; returns the revision acted on. The revision is read first, so a deploy that
    /// commits meanwhile is either loaded now or moves the revision again.
    async fn converge(&self, loaded: Option<u64>) -> Result<u64, Error> {
        let revision = self.store().deployment_revision().await?;
        if loaded == Some(revision) {
            return Ok(revision);
        }
        let _one_at_a_time = self.deploying.lock().await;
        let live = self.live();
        let stored = self.store().deployments(None).await?;
        let missing: Vec<_> = loadable(stored)
            .into_iter()
            .filter(|(record, _)| !live.contains(record))
            .collect();
        if !missing.is_empty() {
            let versions: Vec<String> = missing
                .iter()
                .map(|(record, _)| format!("{}/{} v{}", record.tenant, record.name, record.version))
                .collect();
            info!(
                ?versions,
                "activating deployments made through other replicas"
            );
            self.activate(missing).await?;
        }
        Ok(revision)
    }
}
