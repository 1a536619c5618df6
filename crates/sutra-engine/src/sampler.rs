//! The pulse's sampler (docs/decisions/0061): every [`SAMPLE_INTERVAL`], what this replica's
//! steps did since the last sample, and the backlog the database counts then, kept as one sample
//! of the last fifteen minutes. Every replica runs it, leader or not: the steps it counts are its
//! own.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::pulse::{Depth, SAMPLE_INTERVAL};
use crate::shared::Shared;

/// The sampler, until `shutdown` is set; its first interval begins now.
pub(crate) fn spawn(shared: &Arc<Shared>, shutdown: &watch::Sender<bool>) -> JoinHandle<()> {
    let began = shared.clock.instant();
    tokio::spawn(sample(Arc::clone(shared), began, shutdown.subscribe()))
}

async fn sample(shared: Arc<Shared>, began: Instant, mut shutdown: watch::Receiver<bool>) {
    let clock = &shared.clock;
    let mut last = began;
    loop {
        // The next take is an interval after the last one, however long its count took.
        tokio::select! {
            () = clock.sleep_until(last + SAMPLE_INTERVAL) => {}
            _ = shutdown.changed() => return,
        }
        let (taken, at) = (clock.instant(), clock.now());
        let counted = shared.pulse.take();
        let backlog = shared.count_backlog().await;
        shared.count_live().await;
        let seconds = taken.saturating_duration_since(last).as_secs_f64();
        shared
            .pulse
            .keep(at, seconds, counted, backlog.as_ref().map(Depth::of));
        last = taken;
    }
}
