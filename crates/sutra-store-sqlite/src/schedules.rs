//! Schedule rows on SQLite (migration 0011). The sync's look for a newer version begins the write
//! transaction its writes run in, so that SQLite's single writer orders it with every other sync
//! and deploy; each write is one statement over the version's whole list (`json_each`). The
//! advance and the pause are single conditional statements, atomic on their own: of two
//! schedulers advancing one tick, the second finds `next_at` moved and matches nothing.

use jiff::Timestamp;
use serde_json::json;
use sutra_store::{Advance, Result, ScheduleKey};
use sutra_store_sql::rows::ScheduleRow;
use sutra_store_sql::{ScheduleStatements, ScheduleSync, schedule_columns};

use crate::codec::{db, micros};
use crate::statements::Session;

impl ScheduleStatements for Session {
    async fn newer_version_stored(&mut self, sync: &ScheduleSync<'_>) -> Result<bool> {
        let tx = self.write().await?;
        sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM schedules
                            WHERE tenant = ?1 AND deployment = ?2 AND version > ?3)
                 OR EXISTS (SELECT 1 FROM deployments
                            WHERE tenant = ?1 AND name = ?2 AND version > ?3)",
        )
        .bind(sync.tenant)
        .bind(sync.deployment)
        .bind(i64::from(sync.version))
        .fetch_one(tx.connection())
        .await
        .map_err(db)
    }

    /// `WHERE true`: an `INSERT … SELECT` with an upsert needs a `WHERE` for SQLite to parse
    /// `ON CONFLICT` as the upsert's rather than a join's.
    async fn upsert_schedules(&mut self, sync: &ScheduleSync<'_>) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "INSERT INTO schedules (tenant, deployment, flow, version, expression, zone, next_at)
             SELECT ?1, ?2, json_extract(value, '$.flow'), ?3,
                    json_extract(value, '$.expression'), json_extract(value, '$.zone'),
                    json_extract(value, '$.next_at')
             FROM json_each(?4) WHERE true
             ON CONFLICT (tenant, deployment, flow) DO UPDATE SET
                 version = excluded.version,
                 next_at = CASE WHEN schedules.expression = excluded.expression
                                 AND schedules.zone = excluded.zone
                                THEN schedules.next_at ELSE excluded.next_at END,
                 expression = excluded.expression,
                 zone = excluded.zone
             WHERE schedules.version < excluded.version",
        );
        let schedules: Vec<_> = sync
            .schedules
            .iter()
            .map(|schedule| {
                json!({
                    "flow": schedule.flow,
                    "expression": schedule.expression,
                    "zone": schedule.zone,
                    "next_at": micros(schedule.next_at),
                })
            })
            .collect();
        let query = query
            .bind(sync.tenant)
            .bind(sync.deployment)
            .bind(i64::from(sync.version))
            .bind(json!(schedules).to_string());
        tx.execute(query).await.map(drop)
    }

    async fn delete_unscheduled(&mut self, sync: &ScheduleSync<'_>) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "DELETE FROM schedules
             WHERE tenant = ?1 AND deployment = ?2 AND version < ?3
               AND flow NOT IN (SELECT value FROM json_each(?4))",
        )
        .bind(sync.tenant)
        .bind(sync.deployment)
        .bind(i64::from(sync.version))
        .bind(json!(sync.flows()).to_string());
        tx.execute(query).await.map(drop)
    }

    async fn schedules(&mut self, tenant: Option<&str>) -> Result<Vec<ScheduleRow>> {
        let query = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE ?1 IS NULL OR tenant = ?1
             ORDER BY tenant, deployment, flow"
        ))
        .bind(tenant);
        self.fetch_all(query).await
    }

    /// An index scan of `schedules_due`, which holds the unpaused rows only.
    async fn due_schedules(&mut self, now: Timestamp, limit: u32) -> Result<Vec<ScheduleRow>> {
        let query = sqlx::query_as(concat!(
            "SELECT ",
            schedule_columns!(),
            " FROM schedules WHERE next_at <= ?1 AND paused = 0
             ORDER BY next_at, tenant, deployment, flow LIMIT ?2"
        ))
        .bind(micros(now))
        .bind(i64::from(limit));
        self.fetch_all(query).await
    }

    async fn advance_schedule(
        &mut self,
        key: &ScheduleKey,
        version: u32,
        advance: &Advance,
    ) -> Result<bool> {
        let query = sqlx::query(
            "UPDATE schedules SET next_at = ?6,
                 last_at = COALESCE(?7, last_at),
                 last_instance = CASE WHEN ?7 IS NULL THEN last_instance ELSE ?8 END
             WHERE tenant = ?1 AND deployment = ?2 AND flow = ?3 AND version = ?4
               AND next_at = ?5",
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
        let query = sqlx::query_as(concat!(
            "UPDATE schedules SET paused = ?4
             WHERE tenant = ?1 AND deployment = ?2 AND flow = ?3
             RETURNING ",
            schedule_columns!()
        ))
        .bind(&key.tenant)
        .bind(&key.deployment)
        .bind(&key.flow)
        .bind(paused);
        self.fetch_optional(query).await
    }
}
