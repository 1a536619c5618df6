//! A step's commit on SQLite: the statements of the shared script, in one `BEGIN IMMEDIATE`
//! transaction. Nothing else writes while it holds the write
//! lock, so no statement here needs to be ordered with another transaction's.

use serde_json::Value;
use sqlx::types::Json;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot};
use sutra_core::step::HistoryEvent;
use sutra_store::{
    CANCEL_PARK, ClaimToken, DeliveryId, DeliveryKind, NewChild, OutboxEntry, Report, Result,
    START_PARK, TaskState,
};
use sutra_store_sql::{
    ArmedWait, Correlation, NewDeliveryRow, Statements, StepRows, StepStatements, TaskArm, WaitArm,
    Wrote, settle_fence,
};

use crate::codec::{db, duration_micros, history_kind, micros, park, signed};
use crate::statements::{INBOX_CONSUMED, Session};

impl StepStatements for Session {
    /// One statement per row, in order: nothing else writes while the step holds the write
    /// lock, so the statements cost no round trips to batch away.
    async fn write_rows(&mut self, rows: &StepRows<'_>) -> Result<Wrote> {
        let tenant = &rows.snapshot.instance.tenant;
        if let Some(entry) = rows.message {
            if let Some(key) = &entry.key {
                let on = Correlation {
                    tenant,
                    channel: &entry.channel,
                    key,
                };
                if self.find_wait(on).await?.is_some() {
                    return Ok(Wrote::Waited);
                }
            }
            if !self.insert_inbox(tenant, entry).await? {
                return Ok(Wrote::Consumed);
            }
        }
        match rows.claim {
            Some(token) => {
                if !self.settle(token, rows.snapshot, rows.held_by).await? {
                    return Ok(Wrote::ClaimLost);
                }
                if let Some(entry) = rows.consumed {
                    self.write_inbox(INBOX_CONSUMED, tenant, entry).await?;
                }
            }
            None => self.insert_instance(rows.snapshot, rows.held_by).await?,
        }
        let instance = &rows.snapshot.instance;
        self.insert_history(instance, rows.history).await?;
        for cleared in rows.cleared {
            self.delete_park_rows(&instance.id, cleared.park).await?;
        }
        for task in rows.tasks {
            self.insert_task(task).await?;
        }
        // The cancels first: a child this step inserts is not among the live children it
        // finds, as on PostgreSQL, whose one statement cannot see the rows it inserts.
        let mut asked = Vec::new();
        if !rows.cancelled_calls.is_empty() {
            let cancels = self.cancel_children(instance, rows.cancelled_calls).await?;
            asked.extend(cancels);
        }
        for child in rows.children {
            asked.push(self.insert_child(instance, child).await?);
        }
        if let Some(report) = rows.report {
            asked.extend(self.report(tenant, report).await?);
        }
        Ok(Wrote::Rows { asked })
    }

    /// One process per file: no other process holds a caller, so there is no one to tell.
    async fn announce_ended(&mut self, _instances: &[String]) -> Result<()> {
        Ok(())
    }

    async fn cancel_tasks(&mut self, instance: &str, parks: &[ParkId]) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "UPDATE tasks SET state = ?3, updated_at = ?6
             WHERE instance = ?1 AND park IN (SELECT value FROM json_each(?2))
               AND state IN (?4, ?5)",
        );
        let parks = parks
            .iter()
            .map(|&id| park(id))
            .collect::<Result<Vec<i64>>>()?;
        let query = query
            .bind(instance)
            .bind(serde_json::json!(parks).to_string())
            .bind(TaskState::Cancelled.as_str())
            .bind(TaskState::Available.as_str())
            .bind(TaskState::Locked.as_str())
            .bind(micros(tx.now()));
        tx.execute(query).await.map(drop)
    }

    /// Two statements: the alias, then the buffered message it takes.
    async fn insert_wait(&mut self, wait: &WaitArm<'_>, buffered: bool) -> Result<ArmedWait> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "INSERT INTO waits (tenant, channel, key, instance, park) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT DO NOTHING",
        );
        let query = query
            .bind(wait.on.tenant)
            .bind(wait.on.channel)
            .bind(wait.on.key)
            .bind(&wait.instance.id)
            .bind(park(wait.park)?);
        if tx.execute(query).await? == 0 {
            return Ok(ArmedWait::KeyTaken);
        }
        if !buffered {
            return Ok(ArmedWait::Armed { early: None });
        }
        let now = micros(tx.now());
        let query = sqlx::query_scalar(
            "DELETE FROM buffered WHERE id = (
                 SELECT id FROM buffered
                 WHERE tenant = ?1 AND channel = ?2 AND key = ?3 AND expires_at > ?4
                 ORDER BY id LIMIT 1)
             RETURNING message",
        );
        let early: Option<Json<Value>> = query
            .bind(wait.on.tenant)
            .bind(wait.on.channel)
            .bind(wait.on.key)
            .bind(now)
            .fetch_optional(tx.connection())
            .await
            .map_err(db)?;
        Ok(ArmedWait::Armed {
            early: early.map(|Json(message)| message),
        })
    }

    /// One statement per row.
    async fn insert_outbox(
        &mut self,
        instance: &InstanceInfo,
        entries: &[OutboxEntry],
    ) -> Result<()> {
        let tx = self.write().await?;
        for entry in entries {
            let query = sqlx::query(
                "INSERT INTO outbox (tenant, instance, deployment, version, channel, payload,
                                     message_key, idempotency_key, next_attempt_at, created_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
            );
            let query = query
                .bind(&instance.tenant)
                .bind(&instance.id)
                .bind(&instance.deployment)
                .bind(i64::from(instance.version))
                .bind(&entry.channel)
                .bind(Json(&entry.payload))
                .bind(entry.message_key.as_deref())
                .bind(&entry.idempotency_key)
                .bind(micros(tx.now()));
            tx.execute(query).await?;
        }
        Ok(())
    }

    async fn take_delivery(&mut self, instance: &str, delivery: DeliveryId) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query("DELETE FROM deliveries WHERE id = ?1 AND instance = ?2")
            .bind(delivery.0)
            .bind(instance);
        tx.execute(query).await.map(drop)
    }
}

/// The statements of [`StepStatements::write_rows`].
impl Session {
    async fn settle(
        &mut self,
        token: &ClaimToken,
        snapshot: &Snapshot,
        held_by: Option<&str>,
    ) -> Result<bool> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "UPDATE instances
             SET snapshot = ?1, status = ?2, owner = NULL, claimed_at = NULL, recoveries = 0,
                 fence = fence + ?7, held_by = COALESCE(?8, held_by), version = ?9,
                 updated_at = ?10
             WHERE tenant = ?3 AND id = ?4 AND (?5 IS NULL OR owner = ?5) AND fence = ?6",
        );
        let (owner, growth) = settle_fence(token);
        let query = query
            .bind(Json(snapshot.to_json()))
            .bind(snapshot.status.as_str())
            .bind(&snapshot.instance.tenant)
            .bind(&snapshot.instance.id)
            .bind(owner)
            .bind(token.fence)
            .bind(growth)
            .bind(held_by)
            .bind(i64::from(snapshot.instance.version))
            .bind(micros(tx.now()));
        Ok(tx.execute(query).await? == 1)
    }

    async fn insert_instance(&mut self, snapshot: &Snapshot, held_by: Option<&str>) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "INSERT INTO instances (id, tenant, deployment, version, flow, status, snapshot,
                                    held_by, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9)",
        );
        let instance = &snapshot.instance;
        let query = query
            .bind(&instance.id)
            .bind(&instance.tenant)
            .bind(&instance.deployment)
            .bind(i64::from(instance.version))
            .bind(&instance.flow)
            .bind(snapshot.status.as_str())
            .bind(Json(snapshot.to_json()))
            .bind(held_by)
            .bind(micros(tx.now()));
        tx.execute(query).await.map(drop)
    }

    /// One statement per event. The primary key `(instance, seq)` refuses a repeated sequence,
    /// failing the whole step.
    async fn insert_history(
        &mut self,
        instance: &InstanceInfo,
        events: &[HistoryEvent],
    ) -> Result<()> {
        let tx = self.write().await?;
        for event in events {
            let token = event
                .token
                .map(|token| signed(token.0, "a token id"))
                .transpose()?;
            let query = sqlx::query(
                "INSERT INTO history (tenant, instance, seq, at, kind, node, token, detail)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .bind(&instance.tenant)
            .bind(&instance.id)
            .bind(signed(event.seq, "a history sequence")?)
            .bind(micros(event.at))
            .bind(history_kind(event.kind))
            .bind(&event.node)
            .bind(token)
            .bind(Json(&event.detail));
            tx.execute(query).await?;
        }
        Ok(())
    }

    async fn delete_park_rows(&mut self, instance: &str, park_id: ParkId) -> Result<()> {
        let tx = self.write().await?;
        for resolve in [
            "DELETE FROM waits WHERE instance = ?1 AND park = ?2",
            "DELETE FROM deliveries WHERE instance = ?1 AND park = ?2",
        ] {
            let query = sqlx::query(resolve).bind(instance).bind(park(park_id)?);
            tx.execute(query).await?;
        }
        Ok(())
    }

    /// A called instance, `created`, naming its parent and the park waiting for it, and its
    /// `start` delivery due now, whose id is returned.
    async fn insert_child(
        &mut self,
        parent: &InstanceInfo,
        child: &NewChild,
    ) -> Result<DeliveryId> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "INSERT INTO instances (id, tenant, deployment, version, flow, status, snapshot,
                                    parent, parent_park, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
        );
        let (snapshot, info) = (&child.snapshot, &child.snapshot.instance);
        let query = query
            .bind(&info.id)
            .bind(&parent.tenant)
            .bind(&info.deployment)
            .bind(i64::from(info.version))
            .bind(&info.flow)
            .bind(snapshot.status.as_str())
            .bind(Json(snapshot.to_json()))
            .bind(&parent.id)
            .bind(park(child.park)?)
            .bind(micros(tx.now()));
        tx.execute(query).await?;
        let start = DeliveryKind::Start {
            message: child.start.clone(),
        };
        let row = NewDeliveryRow {
            tenant: &parent.tenant,
            instance: &info.id,
            park: START_PARK,
            kind: &start,
            due_at: None,
        };
        self.insert_delivery(row).await
    }

    /// A `cancel` due now for each child of `parent` waiting on one of `parks` that has not
    /// ended, in one statement; their ids.
    async fn cancel_children(
        &mut self,
        parent: &InstanceInfo,
        parks: &[ParkId],
    ) -> Result<Vec<DeliveryId>> {
        let tx = self.write().await?;
        let (kind, payload) = DeliveryKind::Cancel.encode();
        let query = sqlx::query_scalar(
            "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             SELECT tenant, id, ?4, ?5, ?6, ?7, ?7 FROM instances
             WHERE tenant = ?1 AND parent = ?2 AND parent_park IN (SELECT value FROM json_each(?3))
               AND status NOT IN ('completed', 'cancelled')
             RETURNING id",
        );
        let parks = parks
            .iter()
            .map(|&id| park(id))
            .collect::<Result<Vec<i64>>>()?;
        let ids: Vec<i64> = query
            .bind(&parent.tenant)
            .bind(&parent.id)
            .bind(serde_json::json!(parks).to_string())
            .bind(park(CANCEL_PARK)?)
            .bind(kind)
            .bind(Json(payload))
            .bind(micros(tx.now()))
            .fetch_all(tx.connection())
            .await
            .map_err(db)?;
        Ok(ids.into_iter().map(DeliveryId).collect())
    }

    /// The ending child's `child_ended` for its parent's park, due now, if the parent is there
    /// and has not ended: an ended parent would only discard it, and a purged one has no row to
    /// hold it.
    async fn report(&mut self, tenant: &str, report: &Report) -> Result<Option<DeliveryId>> {
        let tx = self.write().await?;
        let (kind, payload) = DeliveryKind::ChildEnded {
            child: report.child.clone(),
            outcome: report.outcome.clone(),
        }
        .encode();
        let query = sqlx::query_scalar(
            "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?6
             WHERE EXISTS (SELECT 1 FROM instances WHERE tenant = ?1 AND id = ?2
                                                     AND status NOT IN ('completed', 'cancelled'))
             RETURNING id",
        );
        let id: Option<i64> = query
            .bind(tenant)
            .bind(&report.parent)
            .bind(park(report.park)?)
            .bind(kind)
            .bind(Json(payload))
            .bind(micros(tx.now()))
            .fetch_optional(tx.connection())
            .await
            .map_err(db)?;
        Ok(id.map(DeliveryId))
    }

    async fn insert_task(&mut self, task: &TaskArm<'_>) -> Result<()> {
        let tx = self.write().await?;
        let query = sqlx::query(
            "INSERT INTO tasks (id, tenant, instance, park, topic, input, state, attempt, retries,
                                backoff_us, lock_us, lock_token, locked_until, worker,
                                available_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 1, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?14, ?14)
             ON CONFLICT (id) DO UPDATE SET
                 topic = excluded.topic, input = excluded.input, state = excluded.state,
                 attempt = 1, retries = excluded.retries, backoff_us = excluded.backoff_us,
                 lock_us = excluded.lock_us, lock_token = excluded.lock_token,
                 locked_until = excluded.locked_until, worker = excluded.worker,
                 available_at = excluded.available_at, updated_at = excluded.updated_at",
        );
        // A taken task's lock runs out when its worker was told: this process's clock is the
        // store's.
        let taken = task.taken.as_ref();
        let query = query
            .bind(&task.id)
            .bind(&task.instance.tenant)
            .bind(&task.instance.id)
            .bind(park(task.park)?)
            .bind(task.topic)
            .bind(Json(task.input))
            .bind(task.state().as_str())
            .bind(i64::from(task.retries))
            .bind(duration_micros(task.backoff))
            .bind(duration_micros(task.lock))
            .bind(taken.map(|taken| taken.lock_token.as_str()))
            .bind(taken.map(|taken| micros(taken.expires_at)))
            .bind(taken.map(|taken| taken.worker))
            .bind(micros(tx.now()));
        tx.execute(query).await.map(drop)
    }
}
