//! Sutra's embedded store: the [`Store`] trait over one SQLite file (`sutra serve`'s default),
//! or over a throwaway in-memory database (`sqlite::memory:`).
//!
//! Each operation of the trait is one statement or one transaction. SQLite has one writer at a
//! time, so every write transaction takes the write lock up front (`BEGIN IMMEDIATE`, see
//! [`statements::begin_write`]) and waits up to the busy timeout for it; the claim, release,
//! sweep and delivery updates are single conditional statements, atomic on their own. Times are
//! INTEGER microseconds and JSON is TEXT (see [`codec`]), as the PostgreSQL store keeps them.

mod codec;
mod commit;
mod leases;
mod outbox;
mod purge;
mod rows;
mod statements;
mod tasks;

use std::str::FromStr;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use sqlx::migrate::{MigrateError, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{QueryBuilder, Sqlite};
use sutra_core::step::HistoryEvent;
use sutra_store::{
    BufferedMessage, ClaimToken, Claimed, Committed, Delivery, DeliveryId, DeliveryKind,
    DeploymentRecord, DeploymentStatus, Error, InboxAnswer, InboxEntry, InstanceFilter,
    InstanceKey, InstanceRecord, Lease, NewDelivery, OutboxId, OutboxRecord, OutboxRetry, Owner,
    Purged, Result, StepCommit, Store, SweepOutcome, TaskRecord, WaitTarget,
};
use sutra_store::{Polled, TaskFailure, TaskFilter, TaskPoll, TaskState};

use crate::codec::{db, micros, micros_before, now, timestamp};
use crate::rows::{DeliveryRow, DeploymentRow, HistoryRow, InstanceRow, OutboxRow};
use crate::statements::{
    begin_write, find_wait, inbox_answer, insert_delivery, insert_inbox_unless_consumed,
};

/// The schema, embedded in the binary and applied by [`SqliteStore::open`].
static MIGRATOR: Migrator = sqlx::migrate!();

/// How long a writer waits for another's transaction before the store reports itself
/// unavailable. Steps take milliseconds; this is far beyond any healthy wait.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens `sqlite://path.db` or `sqlite:path.db` (creating the file if missing), or a new,
    /// empty database for `sqlite::memory:` (each call its own), and brings the schema up to
    /// date.
    pub async fn open(url: &str) -> Result<SqliteStore> {
        let options = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::Unavailable(format!("`{url}` is not a SQLite URL: {e}")))?
            .foreign_keys(true);
        let pool = if is_in_memory(url) {
            memory_pool(options).await
        } else {
            file_pool(options).await
        }
        .map_err(db)?;
        MIGRATOR.run(&pool).await.map_err(migration_failed)?;
        Ok(SqliteStore { pool })
    }

    /// Waits for every connection to close. An in-memory database is gone after.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// Reads the URL the way sqlx does: sqlx's options have no getter for it, and their
/// `to_url_lossy` panics on the name sqlx gives a `:memory:` database.
fn is_in_memory(url: &str) -> bool {
    let rest = url
        .trim_start_matches("sqlite://")
        .trim_start_matches("sqlite:");
    let (database, params) = rest.split_once('?').unwrap_or((rest, ""));
    database == ":memory:" || params.split('&').any(|param| param == "mode=memory")
}

/// An in-memory database lives only while a connection to it is open, so the pool keeps exactly
/// one, forever. One connection also means shared-cache table locks never contend: those fail
/// at once with `SQLITE_LOCKED`, which no busy timeout waits out.
async fn memory_pool(options: SqliteConnectOptions) -> sqlx::Result<SqlitePool> {
    SqlitePoolOptions::new()
        .min_connections(1)
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect_with(options)
        .await
}

/// WAL lets readers run beside the writer; `synchronous = NORMAL` under WAL is durable against
/// a crash of the process (only a power loss can drop the last commits), which is the embedded
/// store's promise.
async fn file_pool(options: SqliteConnectOptions) -> sqlx::Result<SqlitePool> {
    let options = options
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(BUSY_TIMEOUT);
    SqlitePoolOptions::new().connect_with(options).await
}

/// A schema this build does not know (migrated by a newer Sutra, or edited by hand) is not
/// something a retry fixes.
fn migration_failed(error: MigrateError) -> Error {
    match error {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => db(e),
        other => Error::Corrupt(format!("the database schema: {other}")),
    }
}

#[async_trait::async_trait]
impl Store for SqliteStore {
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord> {
        let created_at = now();
        let mut tx = begin_write(&self.pool).await?;
        sqlx::query(
            "UPDATE deployments SET status = ?3 WHERE tenant = ?1 AND name = ?2 AND status = ?4",
        )
        .bind(tenant)
        .bind(name)
        .bind(DeploymentStatus::Draining.as_str())
        .bind(DeploymentStatus::Active.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        let row: DeploymentRow = sqlx::query_as(
            "INSERT INTO deployments (tenant, name, version, status, source, created_at)
             SELECT ?1, ?2, COALESCE(MAX(version), 0) + 1, ?3, ?4, ?5
             FROM deployments WHERE tenant = ?1 AND name = ?2
             RETURNING tenant, name, version, status, source, created_at",
        )
        .bind(tenant)
        .bind(name)
        .bind(DeploymentStatus::Active.as_str())
        .bind(source)
        .bind(micros(created_at))
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.decode()
    }

    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>> {
        let rows: Vec<DeploymentRow> = sqlx::query_as(
            "SELECT tenant, name, version, status, source, created_at FROM deployments
             WHERE ?1 IS NULL OR tenant = ?1
             ORDER BY created_at, tenant, name, version",
        )
        .bind(tenant)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(DeploymentRow::decode).collect()
    }

    async fn deployment_revision(&self) -> Result<u64> {
        let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM deployments")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        codec::unsigned(count, "a deployment count")
    }

    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed> {
        let now = now();
        let claimed: Option<(i64, String)> = sqlx::query_as(
            "UPDATE instances SET owner = ?1, claimed_at = ?2, fence = fence + 1
             WHERE tenant = ?3 AND id = ?4
               AND (owner IS NULL OR owner = ?1 OR claimed_at < ?5)
             RETURNING fence, snapshot",
        )
        .bind(&owner.0)
        .bind(micros(now))
        .bind(tenant)
        .bind(instance)
        .bind(micros_before(now, claim_timeout))
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        match claimed {
            Some((fence, snapshot)) => Ok(Claimed {
                token: ClaimToken {
                    owner: owner.clone(),
                    fence,
                },
                snapshot: codec::snapshot(&snapshot)?,
            }),
            None if self.instance_exists(tenant, instance).await? => Err(Error::ClaimHeld),
            None => Err(Error::InstanceNotFound(instance.to_owned())),
        }
    }

    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        sqlx::query(
            "UPDATE instances SET owner = NULL, claimed_at = NULL
             WHERE tenant = ?1 AND id = ?2 AND owner = ?3 AND fence = ?4",
        )
        .bind(tenant)
        .bind(instance)
        .bind(&token.owner.0)
        .bind(token.fence)
        .execute(&self.pool)
        .await
        .map_err(db)?;
        Ok(())
    }

    async fn commit(&self, step: &StepCommit) -> Result<Committed> {
        commit::commit(&self.pool, step).await
    }

    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome> {
        let swept: Vec<(String, String, i64)> = sqlx::query_as(
            "UPDATE instances SET owner = NULL, claimed_at = NULL, recoveries = recoveries + 1
             WHERE claimed_at < ?1
             RETURNING tenant, id, recoveries",
        )
        .bind(micros_before(now(), claim_timeout))
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        let cleared = swept.len() as u64;
        let poisoned = swept
            .into_iter()
            .filter(|(_, _, recoveries)| *recoveries >= i64::from(max_recoveries))
            .map(|(tenant, id, _)| InstanceKey { tenant, id })
            .collect();
        Ok(SweepOutcome { cleared, poisoned })
    }

    async fn find_wait(
        &self,
        tenant: &str,
        channel: &str,
        key: &str,
    ) -> Result<Option<WaitTarget>> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        find_wait(&mut conn, tenant, channel, key).await
    }

    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        inbox_answer(&mut conn, tenant, channel, event_id).await
    }

    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>> {
        let now = now();
        let mut tx = begin_write(&self.pool).await?;
        let entry = InboxEntry {
            channel: message.channel.clone(),
            event_id: message.message.id.clone(),
            answer: InboxAnswer::buffered(),
        };
        if let Some(first) = insert_inbox_unless_consumed(&mut tx, tenant, &entry, now).await? {
            return Ok(Some(first));
        }
        // The caller found no wait, but one may have been armed since: the park's transaction
        // looked for buffered messages before this one existed, so relay to it here instead.
        match find_wait(&mut tx, tenant, &message.channel, &message.key).await? {
            Some(wait) => {
                let relay = NewDelivery {
                    tenant: tenant.to_owned(),
                    instance: wait.instance,
                    park: wait.park,
                    kind: DeliveryKind::Relay {
                        message: message.message.clone(),
                    },
                    due_at: now,
                };
                insert_delivery(&mut tx, &relay, now).await?;
            }
            None => {
                sqlx::query(
                    "INSERT INTO buffered (tenant, channel, key, event_id, message, expires_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .bind(tenant)
                .bind(&message.channel)
                .bind(&message.key)
                .bind(&message.message.id)
                .bind(message.message.to_json().to_string())
                .bind(micros(message.expires_at))
                .execute(&mut *tx)
                .await
                .map_err(db)?;
            }
        }
        tx.commit().await.map_err(db)?;
        Ok(None)
    }

    async fn ask(&self, delivery: &NewDelivery) -> Result<DeliveryId> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        insert_delivery(&mut conn, delivery, now()).await
    }

    async fn due_deliveries(&self, limit: u32) -> Result<Vec<Delivery>> {
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE due_at <= ?1 ORDER BY due_at, id LIMIT ?2",
        )
        .bind(micros(now()))
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(DeliveryRow::decode).collect()
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>> {
        let row: Option<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE id = ?1",
        )
        .bind(id.0)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        row.map(DeliveryRow::decode).transpose()
    }

    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()> {
        sqlx::query("UPDATE deliveries SET due_at = ?2, attempts = attempts + 1 WHERE id = ?1")
            .bind(id.0)
            .bind(micros(until))
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn discard(&self, id: DeliveryId) -> Result<()> {
        sqlx::query("DELETE FROM deliveries WHERE id = ?1")
            .bind(id.0)
            .execute(&self.pool)
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let earliest: Option<i64> = sqlx::query_scalar("SELECT MIN(due_at) FROM deliveries")
            .fetch_one(&self.pool)
            .await
            .map_err(db)?;
        earliest.map(timestamp).transpose()
    }

    async fn claim_outbox(
        &self,
        batch: u32,
        stale_after: SignedDuration,
    ) -> Result<Vec<sutra_store::OutboxRow>> {
        outbox::claim(&self.pool, batch, stale_after).await
    }

    async fn outbox_sent(&self, id: OutboxId) -> Result<()> {
        outbox::sent(&self.pool, id).await
    }

    async fn outbox_failed(&self, id: OutboxId, error: &str, retry: OutboxRetry) -> Result<()> {
        outbox::failed(&self.pool, id, error, retry).await
    }

    async fn poll_tasks(&self, poll: &TaskPoll) -> Result<Polled> {
        tasks::poll(&self.pool, poll).await
    }

    async fn next_task_at(&self, tenant: &str, topics: &[String]) -> Result<Option<Timestamp>> {
        tasks::next_at(&self.pool, tenant, topics).await
    }

    async fn complete_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        output: &serde_json::Value,
    ) -> Result<()> {
        tasks::complete(&self.pool, tenant, id, lock_token, output).await
    }

    async fn fail_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        failure: &TaskFailure,
    ) -> Result<TaskState> {
        tasks::fail(&self.pool, tenant, id, lock_token, failure).await
    }

    async fn extend_task(
        &self,
        tenant: &str,
        id: &str,
        lock_token: &str,
        lock: SignedDuration,
    ) -> Result<Timestamp> {
        tasks::extend(&self.pool, tenant, id, lock_token, lock).await
    }

    /// A SQLite file belongs to one `sutra serve`; a second process on the same file leads every
    /// role too (SPEC §6), kept correct by the claims alone.
    fn shared_by_replicas(&self) -> bool {
        false
    }

    async fn acquire_lease(
        &self,
        role: &str,
        holder: &str,
        ttl: SignedDuration,
    ) -> Result<Option<Lease>> {
        leases::acquire(&self.pool, role, holder, ttl).await
    }

    async fn release_lease(&self, role: &str, holder: &str) -> Result<()> {
        leases::release(&self.pool, role, holder).await
    }

    async fn leases(&self) -> Result<Vec<Lease>> {
        leases::all(&self.pool).await
    }

    async fn purge(&self, retention: SignedDuration, batch: u32) -> Result<Purged> {
        purge::purge(&self.pool, retention, batch).await
    }

    async fn instance(&self, tenant: &str, id: &str) -> Result<Option<InstanceRecord>> {
        let row: Option<InstanceRow> = sqlx::query_as(
            "SELECT snapshot, owner, fence, recoveries, created_at, updated_at FROM instances
             WHERE tenant = ?1 AND id = ?2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db)?;
        row.map(InstanceRow::decode).transpose()
    }

    async fn instances(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
    ) -> Result<Vec<InstanceRecord>> {
        // Only the filters given appear in the SQL, so that SQLite can use the index of each.
        let mut sql = QueryBuilder::<Sqlite>::new(
            "SELECT snapshot, owner, fence, recoveries, created_at, updated_at FROM instances
             WHERE tenant = ",
        );
        sql.push_bind(tenant.to_owned());
        if let Some(status) = filter.status {
            sql.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(flow) = &filter.flow {
            sql.push(" AND flow = ").push_bind(flow.clone());
        }
        if let Some(after) = &filter.after {
            sql.push(" AND id > ").push_bind(after.clone());
        }
        sql.push(" ORDER BY id");
        if filter.limit > 0 {
            sql.push(" LIMIT ").push_bind(filter.limit);
        }
        let rows: Vec<InstanceRow> = sql
            .build_query_as()
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        rows.into_iter().map(InstanceRow::decode).collect()
    }

    async fn history(&self, tenant: &str, id: &str) -> Result<Vec<HistoryEvent>> {
        let rows: Vec<HistoryRow> = sqlx::query_as(
            "SELECT seq, at, kind, node, token, detail FROM history
             WHERE tenant = ?1 AND instance = ?2 ORDER BY seq",
        )
        .bind(tenant)
        .bind(id)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(HistoryRow::decode).collect()
    }

    async fn tasks(&self, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>> {
        tasks::of_instance(&self.pool, tenant, instance).await
    }

    async fn list_tasks(&self, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
        tasks::list(&self.pool, tenant, filter).await
    }

    async fn outbox(&self, tenant: &str, instance: &str) -> Result<Vec<OutboxRecord>> {
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT channel, payload, message_key, idempotency_key, instance, deployment, version,
                    attempts, sent_at, poisoned, last_error, next_attempt_at
             FROM outbox WHERE tenant = ?1 AND instance = ?2 ORDER BY id",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_all(&self.pool)
        .await
        .map_err(db)?;
        rows.into_iter().map(OutboxRow::decode).collect()
    }

    /// Readiness means the store accepts a commit, so this takes the write lock and lets go.
    async fn ping(&self) -> Result<()> {
        begin_write(&self.pool).await?.commit().await.map_err(db)
    }
}

impl SqliteStore {
    async fn instance_exists(&self, tenant: &str, id: &str) -> Result<bool> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM instances WHERE tenant = ?1 AND id = ?2")
                .bind(tenant)
                .bind(id)
                .fetch_optional(&self.pool)
                .await
                .map_err(db)?;
        Ok(found.is_some())
    }
}
