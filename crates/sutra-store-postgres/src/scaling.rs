//! The scaling signal's counts on PostgreSQL: the shared statements of
//! `sutra_store_sql::scaling`, each served by an index (`tasks_available`, `tasks_locked`,
//! `outbox_pending`, `instances_live`) — except the fleet's terminal statuses' instance counts,
//! which grow without bound and are estimated at volume
//! (docs/decisions/0057-counts-at-volume.md). A tenant's are counted exactly: asked for by its
//! administrator, not by every scrape, and bounded by its own history (decision 0076).

use sutra_store::Result;
use sutra_store_sql::ScalingStatements;
use sutra_store_sql::scaling::{LIVE_BY_TENANT, instances, tasks_available, waiting};

use crate::codec::db;
use crate::statements::Scoped;

/// Below this many instances (as `pg_class.reltuples` has them) every status is counted
/// exactly: a few milliseconds. A table never analyzed reads −1, so a new one is exact.
const ESTIMATE_FROM: i64 = 100_000;

/// About this many of the table's pages are sampled for the terminal statuses' shares.
const SAMPLED_PAGES: f64 = 100.0;

/// The table's rows and pages as the last `VACUUM` or `ANALYZE` (auto or not) counted them.
const SIZE: &str = "SELECT reltuples::bigint, relpages::bigint FROM pg_class
    WHERE oid = 'instances'::regclass";

/// The statuses an instance can leave, counted exactly through `instances_live` (0015).
const LIVE: &str = "SELECT status, COUNT(*) FROM instances
    WHERE status IN ('created', 'suspended', 'failed') GROUP BY status ORDER BY status";

/// The terminal statuses in a sample of the table's pages (`$1` percent of them): their shares.
/// `pg_stats` has the same shares from the last `ANALYZE`, but hides a table under row-level
/// security from every role it binds, which is the engine's.
const TERMINAL_SAMPLE: &str = "SELECT COUNT(*) FILTER (WHERE status = 'completed'),
    COUNT(*) FILTER (WHERE status = 'cancelled')
    FROM instances TABLESAMPLE SYSTEM ($1::real)";

impl ScalingStatements for Scoped {
    async fn waiting(&mut self, tenant: Option<&str>) -> Result<(i64, i64, i64)> {
        waiting(tenant)
            .build_query_as()
            .fetch_one(self.connection())
            .await
            .map_err(db)
    }

    async fn tasks_available(
        &mut self,
        tenant: Option<&str>,
    ) -> Result<Vec<(String, String, i64)>> {
        tasks_available(tenant)
            .build_query_as()
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }

    /// A tenant's, and the fleet's below [`ESTIMATE_FROM`] instances: exact. The fleet's above
    /// it: the live statuses exact and the terminal ones an estimate — the table's rows
    /// (`reltuples`) less the live ones, split between `completed` and `cancelled` as a sample
    /// of the table's pages has them.
    async fn instances_by_status(&mut self, tenant: Option<&str>) -> Result<Vec<(String, i64)>> {
        if tenant.is_some() {
            return self.exact_instances_by_status(tenant).await;
        }
        let (rows, pages): (i64, i64) = sqlx::query_as(SIZE)
            .fetch_one(self.connection())
            .await
            .map_err(db)?;
        if rows < ESTIMATE_FROM {
            return self.exact_instances_by_status(None).await;
        }
        let mut counts: Vec<(String, i64)> = sqlx::query_as(LIVE)
            .fetch_all(self.connection())
            .await
            .map_err(db)?;
        let live: i64 = counts.iter().map(|(_, n)| n).sum();
        // Page counts are far below 2^24: exact as floats.
        let percent = (100.0 * SAMPLED_PAGES / pages.max(1) as f64).min(100.0);
        let (completed, cancelled): (i64, i64) = sqlx::query_as(TERMINAL_SAMPLE)
            .bind(percent as f32)
            .fetch_one(self.connection())
            .await
            .map_err(db)?;
        let (completed, cancelled) = split((rows - live).max(0), completed, cancelled);
        // As `GROUP BY` has them: a status without instances has no row.
        let terminal = [("completed", completed), ("cancelled", cancelled)];
        counts.extend(
            terminal
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(status, n)| (status.to_owned(), n)),
        );
        Ok(counts)
    }

    /// Exact at any volume, through `instances_live`.
    async fn live_by_tenant(&mut self) -> Result<Vec<(String, i64)>> {
        sqlx::query_as(LIVE_BY_TENANT)
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }
}

impl Scoped {
    /// Every status counted exactly, of `tenant` (every tenant's when `None`).
    async fn exact_instances_by_status(
        &mut self,
        tenant: Option<&str>,
    ) -> Result<Vec<(String, i64)>> {
        instances(tenant)
            .build_query_as()
            .fetch_all(self.connection())
            .await
            .map_err(db)
    }
}

/// `terminal` instances shared out as the sampled `completed` and `cancelled` ones are; all of
/// them completed when the sample holds no terminal instance.
fn split(terminal: i64, completed: i64, cancelled: i64) -> (i64, i64) {
    let sampled = completed + cancelled;
    if sampled == 0 {
        return (terminal, 0);
    }
    // Counts far below 2^52: exact as floats.
    let cancelled = (terminal as f64 * cancelled as f64 / sampled as f64).round() as i64;
    (terminal - cancelled, cancelled)
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn the_terminal_estimate_is_shared_as_the_sample_is() {
        assert_eq!(split(1000, 90, 10), (900, 100));
        assert_eq!(split(1000, 0, 0), (1000, 0));
        assert_eq!(split(0, 5, 5), (0, 0));
        assert_eq!(split(7, 0, 3), (0, 7));
    }
}
