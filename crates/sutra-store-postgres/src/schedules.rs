//! Schedule rows on PostgreSQL (migration 0014). The sync runs acting for the tenant, after the
//! deployment's advisory lock (see [`sutra_store_sql::Statements::serialize`]), so that its
//! "is a newer version stored?" and its writes are not interleaved with another sync of the
//! deployment; each of its writes is one statement over the version's whole list (arrays and
//! `unnest`). The due scan reads across tenants in the system scope; the advance is one update
//! guarded by the `next_at` the scheduler read, so of two leaders advancing one tick (a lease
//! handed over mid-pass) the second matches nothing: under READ COMMITTED it waits for the first's
//! row lock and then judges the row's new `next_at`.

use jiff::Timestamp;
use sutra_store::codec::micros;
use sutra_store::{Advance, Result, ScheduleKey};
use sutra_store_sql::rows::ScheduleRow;
use sutra_store_sql::{ScheduleStatements, ScheduleSync, schedule_columns};

use crate::codec::db;
use crate::statements::Scoped;

impl ScheduleStatements for Scoped {
    async fn newer_version_stored(&mut self, sync: &ScheduleSync<'_>) -> Result<bool> {
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM schedules
                            WHERE tenant = $1 AND deployment = $2 AND version > $3)
                 OR EXISTS (SELECT 1 FROM deployments
                            WHERE tenant = $1 AND name = $2 AND version > $3)",
        )
        .bind(sync.tenant)
        .bind(sync.deployment)
        .bind(i64::from(sync.version))
        .fetch_one(self.connection())
        .await
        .map_err(db)
    }

    async fn upsert_schedules(&mut self, sync: &ScheduleSync<'_>) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO schedules (tenant, deployment, flow, version, expression, zone, next_at)
             SELECT $1, $2, flow, $3, expression, zone, next_at
             FROM unnest($4::text[], $5::text[], $6::text[], $7::bigint[])
                  AS schedule (flow, expression, zone, next_at)
             ON CONFLICT (tenant, deployment, flow) DO UPDATE SET
                 version = excluded.version,
                 next_at = CASE WHEN schedules.expression = excluded.expression
                                 AND schedules.zone = excluded.zone
                                THEN schedules.next_at ELSE excluded.next_at END,
                 expression = excluded.expression,
                 zone = excluded.zone
             WHERE schedules.version < excluded.version",
        );
        let schedules = sync.schedules;
        let query = query
            .bind(sync.tenant)
            .bind(sync.deployment)
            .bind(i64::from(sync.version))
            .bind(sync.flows())
            .bind(schedules.iter().map(|s| &s.expression).collect::<Vec<_>>())
            .bind(schedules.iter().map(|s| &s.zone).collect::<Vec<_>>())
            .bind(
                schedules
                    .iter()
                    .map(|s| micros(s.next_at))
                    .collect::<Vec<_>>(),
            );
        self.execute(query).await.map(drop)
    }

    async fn delete_unscheduled(&mut self, sync: &ScheduleSync<'_>) -> Result<()> {
        let query = sqlx::query(
            "DELETE FROM schedules
             WHERE tenant = $1 AND deployment = $2 AND version < $3 AND flow <> ALL($4::text[])",
        )
        .bind(sync.tenant)
        .bind(sync.deployment)
        .bind(i64::from(sync.version))
        .bind(sync.flows());
        self.execute(query).await.map(drop)
    }

    async fn schedules(&mut self, tenant: Option<&str>) -> Result<Vec<ScheduleRow>> {
        sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE $1::text IS NULL OR tenant = $1
             ORDER BY tenant, deployment, flow"
        ))
        .bind(tenant)
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    /// An index scan of `schedules_due`, which holds the unpaused rows only.
    async fn due_schedules(&mut self, now: Timestamp, limit: u32) -> Result<Vec<ScheduleRow>> {
        sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE next_at <= $1 AND NOT paused
             ORDER BY next_at, tenant, deployment, flow LIMIT $2"
        ))
        .bind(micros(now))
        .bind(i64::from(limit))
        .fetch_all(self.connection())
        .await
        .map_err(db)
    }

    async fn advance_schedule(
        &mut self,
        key: &ScheduleKey,
        version: u32,
        advance: &Advance,
    ) -> Result<bool> {
        let query = sqlx::query(
            "UPDATE schedules SET next_at = $6,
                 last_at = COALESCE($7, last_at),
                 last_instance = CASE WHEN $7::bigint IS NULL THEN last_instance ELSE $8 END
             WHERE tenant = $1 AND deployment = $2 AND flow = $3 AND version = $4
               AND next_at = $5",
        );
        let (fired_at, instance) = advance
            .fired
            .as_ref()
            .map(|(at, instance)| (micros(*at), instance.as_str()))
            .unzip();
        let query = query
            .bind(&key.tenant)
            .bind(&key.deployment)
            .bind(&key.flow)
            .bind(i64::from(version))
            .bind(micros(advance.from))
            .bind(micros(advance.next_at))
            .bind(fired_at)
            .bind(instance);
        Ok(self.execute(query).await? == 1)
    }

    async fn set_schedule_paused(
        &mut self,
        key: &ScheduleKey,
        paused: bool,
    ) -> Result<Option<ScheduleRow>> {
        sqlx::query_as(concat!(
            "UPDATE schedules SET paused = $4
             WHERE tenant = $1 AND deployment = $2 AND flow = $3
             RETURNING ",
            schedule_columns!()
        ))
        .bind(&key.tenant)
        .bind(&key.deployment)
        .bind(&key.flow)
        .bind(paused)
        .fetch_optional(self.connection())
        .await
        .map_err(db)
    }
}
