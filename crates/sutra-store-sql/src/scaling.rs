//! The scaling signal's counts (SPEC §8), in one system-scoped read. The statements are the
//! same text on both backends, and literal where a partial index is to serve them (a state bound
//! as a parameter would keep PostgreSQL's generic plan off `tasks_available` and
//! `outbox_pending`).

use std::future::Future;

use sutra_core::snapshot::Status;
use sutra_store::codec::{corrupt, unsigned};
use sutra_store::{Backlog, Result, Scaling};

use crate::statements::{Backend, Scope, Statements};
use crate::store::SqlStore;

/// The inbox's backlog, the outbox's, and the tasks workers hold: what a KEDA `ScaledObject`
/// adds up (with the available tasks) as the fleet's work.
pub const WAITING: &str = "SELECT
    (SELECT COUNT(*) FROM buffered),
    (SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND NOT poisoned),
    (SELECT COUNT(*) FROM tasks WHERE state = 'locked')";

/// The fleet's waiting work as one number — buffered messages, pending outbox rows, available
/// and locked tasks — what a KEDA `ScaledObject`'s PostgreSQL scaler divides by its target per
/// replica. `deploy/keda/scaledobject.yaml` and the chart hold this text, word for word (a test
/// compares them), and it counts what the gauges count.
pub const SCALING_SIGNAL: &str = "SELECT (SELECT COUNT(*) FROM buffered) + (SELECT COUNT(*) FROM outbox WHERE sent_at IS NULL AND NOT poisoned) + (SELECT COUNT(*) FROM tasks WHERE state IN ('available', 'locked'))";

/// Available tasks by topic.
pub const TASKS_AVAILABLE: &str =
    "SELECT topic, COUNT(*) FROM tasks WHERE state = 'available' GROUP BY topic ORDER BY topic";

/// Instances by status.
pub const INSTANCES: &str =
    "SELECT status, COUNT(*) FROM instances GROUP BY status ORDER BY status";

#[async_trait::async_trait]
impl<B: Backend> Scaling for SqlStore<B> {
    async fn backlog(&self) -> Result<Backlog> {
        let (waiting, available, instances) = self
            .once(Scope::System, async |tx| {
                let waiting = tx.waiting().await?;
                let available = tx.tasks_available().await?;
                let instances = tx.instances_by_status().await?;
                Ok((waiting, available, instances))
            })
            .await?;
        let (inbox, outbox, locked) = waiting;
        let count = |n: i64| unsigned(n, "a count");
        Ok(Backlog {
            inbox: count(inbox)?,
            outbox: count(outbox)?,
            tasks_locked: count(locked)?,
            tasks_available: available
                .into_iter()
                .map(|(topic, n)| Ok((topic, count(n)?)))
                .collect::<Result<_>>()?,
            instances: instances
                .into_iter()
                .map(|(status, n)| {
                    let parsed = Status::parse(&status)
                        .ok_or_else(|| corrupt("an instance status", &status))?;
                    Ok((parsed, count(n)?))
                })
                .collect::<Result<_>>()?,
        })
    }
}

/// The scaling signal's counts (`scaling`), each the statement of the same name there.
pub trait ScalingStatements: Statements {
    /// Buffered messages, pending outbox rows, locked tasks.
    fn waiting(&mut self) -> impl Future<Output = Result<(i64, i64, i64)>> + Send;
    fn tasks_available(&mut self) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;
    fn instances_by_status(&mut self) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send;
}
