//! Sutra's production store: the [`Store`] trait over one PostgreSQL database shared by every
//! replica (`sutra serve --db postgres://…`).
//!
//! Each operation of the trait is one transaction, scoped to the tenant it acts for (see
//! [`scope`]): row-level security, enabled and forced on every table, shows it no other tenant's
//! rows. The claim, release, sweep and delivery updates are single conditional statements inside
//! it; a step's commit is one transaction led by its fenced update (see [`commit`]). Every "now"
//! is the database's clock, so that replicas never compare claims or locks across clocks. The
//! reasoning — concurrency, the clock, row-level security, timeouts — is in
//! docs/decisions/0015-postgres-store.md.

mod codec;
mod commit;
mod leases;
mod notices;
mod outbox;
mod purge;
mod rows;
mod schema;
mod scope;
mod statements;
mod tasks;

use std::str::FromStr;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde_json::Value;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::types::Json;
use sqlx::{Connection, Postgres, QueryBuilder};
use sutra_core::step::HistoryEvent;
use sutra_store::{
    BufferedMessage, ClaimToken, Claimed, Committed, Delivery, DeliveryId, DeliveryKind,
    DeploymentRecord, DeploymentStatus, Error, InboxAnswer, InboxEntry, InstanceFilter,
    InstanceKey, InstanceRecord, Lease, NewDelivery, OutboxId, OutboxRecord, OutboxRetry, Owner,
    Polled, Purged, Result, StepCommit, Store, SweepOutcome, TaskFailure, TaskFilter, TaskPoll,
    TaskRecord, TaskState, WaitTarget,
};

use crate::codec::{age, db, is_lock_timeout, micros, timestamp};
use crate::rows::{DeliveryRow, DeploymentRow, HistoryRow, InstanceRow, OutboxRow};
use crate::schema::migrate_with;
use crate::scope::{Scope, begin};
use crate::statements::{
    LockOn, NewDeliveryRow, find_wait, inbox_answer, insert_delivery, insert_inbox_unless_consumed,
    lock,
};

/// How long a statement waits for a row or advisory lock. Steps hold their locks for
/// milliseconds; a wait this long means the holder is stuck (a frozen replica mid-transaction),
/// and the store refuses rather than waiting on another replica's timescale.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a session may sit idle inside a transaction before the server ends it, releasing its
/// locks. The store never idles in a transaction on purpose; a replica frozen (SIGSTOP) or
/// partitioned mid-transaction does, and must not hold rows forever.
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// A pooled connection idle this long is pinged before it is used, and replaced if the ping
/// fails (the database restarted, a firewall dropped it). One busier than that is used at once:
/// a ping on every use costs a round trip per operation (about 30 µs, 7–25 % of an operation,
/// measured), and a connection that died while in use fails its operation as
/// [`Error::Unavailable`], which is retry-safe, and leaves the pool.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// How long an operation waits for a pooled connection before reporting the store unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How [`PostgresStore::open`] connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The most connections the pool opens.
    pub pool_size: u32,
    /// Whether to apply pending migrations at open. Turn off where the schema is migrated
    /// separately (`sutra db migrate`) by a role allowed to change it.
    pub migrate: bool,
    /// The URL to migrate through, as the role that owns the schema; `None`: the serving URL,
    /// which is enough when that role owns the schema or the schema is already current.
    pub migrate_url: Option<String>,
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            pool_size: 10,
            migrate: true,
            migrate_url: None,
        }
    }
}

pub struct PostgresStore {
    pool: PgPool,
    notices: notices::Notices,
}

impl PostgresStore {
    /// Connects to `postgres://…` (or `postgresql://…`) with a pool of at most
    /// `options.pool_size` connections, and brings the schema up to date unless told not to.
    /// Connections are opened lazily, as work needs them, and reopened after the database comes
    /// back; each connection prepares and caches the statements it runs.
    pub async fn open(url: &str, options: &PostgresOptions) -> Result<PostgresStore> {
        let connect = connect_options(url)?;
        if options.migrate {
            match &options.migrate_url {
                Some(owner) => migrate(owner).await?,
                None => migrate_with(&connect).await?,
            }
        }
        let notices = notices::Notices::new(connect.clone());
        let session = connect.options([
            ("lock_timeout", millis(LOCK_TIMEOUT)),
            (
                "idle_in_transaction_session_timeout",
                millis(IDLE_IN_TRANSACTION_TIMEOUT),
            ),
        ]);
        let pool = PgPoolOptions::new()
            .max_connections(options.pool_size)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(false)
            .before_acquire(|connection, metadata| {
                Box::pin(async move {
                    if metadata.idle_for >= PING_AFTER_IDLE {
                        connection.ping().await?;
                    }
                    Ok(true)
                })
            })
            .connect_lazy_with(session);
        Ok(PostgresStore { pool, notices })
    }
}

/// Applies every pending migration to the database at `url` (`sutra db migrate`). Safe to run
/// from many replicas at once: sqlx serializes migrators with an advisory lock, and applied
/// migrations are skipped.
pub async fn migrate(url: &str) -> Result<()> {
    migrate_with(&connect_options(url)?).await
}

/// Why row-level security would not bind a replica serving as the role of `url`, if it would not
/// (a superuser, BYPASSRLS, or the tables' owner); empty for an ordinary serving role.
pub async fn row_security_gaps(url: &str) -> Result<Vec<String>> {
    schema::row_security_gaps(&connect_options(url)?).await
}

fn connect_options(url: &str) -> Result<PgConnectOptions> {
    // sqlx reads any URL's host, port and path, whatever its scheme.
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Error::Unavailable(
            "not a PostgreSQL URL: it must start with postgres:// or postgresql://".to_owned(),
        ));
    }
    let options = PgConnectOptions::from_str(url)
        .map_err(|e| Error::Unavailable(format!("not a PostgreSQL URL: {e}")))?;
    // Named in pg_stat_activity, unless the URL names it otherwise.
    Ok(match options.get_application_name() {
        Some(_) => options,
        None => options.application_name("sutra"),
    })
}

fn millis(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}

#[async_trait::async_trait]
impl Store for PostgresStore {
    async fn deploy(&self, tenant: &str, name: &str, source: &str) -> Result<DeploymentRecord> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        // Two deploys of one name would both read version n and both insert n+1.
        lock(&mut tx, &[LockOn::Deployment { tenant, name }]).await?;
        sqlx::query(
            "UPDATE deployments SET status = $3 WHERE tenant = $1 AND name = $2 AND status = $4",
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
             SELECT $1, $2, COALESCE(MAX(version), 0) + 1, $3, $4, sutra_now()
             FROM deployments WHERE tenant = $1 AND name = $2
             RETURNING tenant, name, version, status, source, created_at",
        )
        .bind(tenant)
        .bind(name)
        .bind(DeploymentStatus::Active.as_str())
        .bind(source)
        .fetch_one(&mut *tx)
        .await
        .map_err(db)?;
        // Delivered at the commit, to every replica listening (see `notices`).
        sqlx::query("SELECT pg_notify($1, '')")
            .bind(notices::CHANNEL)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.decode()
    }

    async fn deployments(&self, tenant: Option<&str>) -> Result<Vec<DeploymentRecord>> {
        let scope = tenant.map_or(Scope::System, Scope::Tenant);
        let mut tx = begin(&self.pool, scope).await?;
        let rows: Vec<DeploymentRow> = sqlx::query_as(
            "SELECT tenant, name, version, status, source, created_at FROM deployments
             WHERE $1::text IS NULL OR tenant = $1
             ORDER BY created_at, tenant, name, version",
        )
        .bind(tenant)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        rows.into_iter().map(DeploymentRow::decode).collect()
    }

    async fn deployment_revision(&self) -> Result<u64> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        let count: i64 = sqlx::query_scalar("SELECT count(*) FROM deployments")
            .fetch_one(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        codec::unsigned(count, "a deployment count")
    }

    async fn deployment_notice(&self) -> Result<()> {
        self.notices.next().await
    }

    async fn claim(
        &self,
        tenant: &str,
        instance: &str,
        owner: &Owner,
        claim_timeout: SignedDuration,
    ) -> Result<Claimed> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let claimed: Option<(i64, Json<Value>)> = sqlx::query_as(
            "UPDATE instances SET owner = $1, claimed_at = sutra_now(), fence = fence + 1
             WHERE tenant = $2 AND id = $3
               AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)
             RETURNING fence, snapshot",
        )
        .bind(&owner.0)
        .bind(tenant)
        .bind(instance)
        .bind(age(claim_timeout))
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| {
            // The row stayed locked by a transaction that is neither committing nor dying:
            // held, as far as any claimant can tell, and retry-safe like any refusal.
            if is_lock_timeout(&e) {
                Error::ClaimHeld
            } else {
                db(e)
            }
        })?;
        match claimed {
            Some((fence, Json(snapshot))) => {
                tx.commit().await.map_err(db)?;
                Ok(Claimed {
                    token: ClaimToken {
                        owner: owner.clone(),
                        fence,
                    },
                    snapshot: codec::snapshot(snapshot)?,
                })
            }
            // Nothing was written: dropping the transaction rolls it back.
            None => {
                let exists: Option<i32> =
                    sqlx::query_scalar("SELECT 1 FROM instances WHERE tenant = $1 AND id = $2")
                        .bind(tenant)
                        .bind(instance)
                        .fetch_optional(&mut *tx)
                        .await
                        .map_err(db)?;
                match exists {
                    Some(_) => Err(Error::ClaimHeld),
                    None => Err(Error::InstanceNotFound(instance.to_owned())),
                }
            }
        }
    }

    async fn release(&self, tenant: &str, instance: &str, token: &ClaimToken) -> Result<()> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        sqlx::query(
            "UPDATE instances SET owner = NULL, claimed_at = NULL
             WHERE tenant = $1 AND id = $2 AND owner = $3 AND fence = $4",
        )
        .bind(tenant)
        .bind(instance)
        .bind(&token.owner.0)
        .bind(token.fence)
        .execute(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn commit(&self, step: &StepCommit) -> Result<Committed> {
        commit::commit(&self.pool, step).await
    }

    async fn sweep(
        &self,
        claim_timeout: SignedDuration,
        max_recoveries: u32,
    ) -> Result<SweepOutcome> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        let swept: Vec<(String, String, i64)> = sqlx::query_as(
            "UPDATE instances SET owner = NULL, claimed_at = NULL, recoveries = recoveries + 1
             WHERE claimed_at < sutra_now() - $1
             RETURNING tenant, id, recoveries",
        )
        .bind(age(claim_timeout))
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
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
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let wait = find_wait(&mut tx, tenant, channel, key).await?;
        tx.commit().await.map_err(db)?;
        Ok(wait)
    }

    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let answer = inbox_answer(&mut tx, tenant, channel, event_id).await?;
        tx.commit().await.map_err(db)?;
        Ok(answer)
    }

    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        // Ordered with any park on the key (see commit::StepWriter::lock_waits): the wait a park
        // committed before this lock is seen below; a park after it sees the buffered row. Taken
        // before any row is written, so that this transaction never holds a row a park's
        // commit (which holds the lock) could wait for.
        let correlation = LockOn::Correlation {
            tenant,
            channel: &message.channel,
            key: &message.key,
        };
        lock(&mut tx, &[correlation]).await?;
        let entry = InboxEntry {
            channel: message.channel.clone(),
            event_id: message.message.id.clone(),
            answer: InboxAnswer::buffered(),
        };
        if let Some(first) = insert_inbox_unless_consumed(&mut tx, tenant, &entry).await? {
            return Ok(Some(first));
        }
        // The caller found no wait, but one may have been armed since: the park's transaction
        // looked for buffered messages before this one existed, so relay to it here instead.
        match find_wait(&mut tx, tenant, &message.channel, &message.key).await? {
            Some(wait) => {
                let relay = DeliveryKind::Relay {
                    message: message.message.clone(),
                };
                let row = NewDeliveryRow {
                    tenant,
                    instance: &wait.instance,
                    park: wait.park,
                    kind: &relay,
                    due_at: None,
                };
                insert_delivery(&mut tx, row).await?;
            }
            None => {
                sqlx::query(
                    "INSERT INTO buffered (tenant, channel, key, event_id, message, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6)",
                )
                .bind(tenant)
                .bind(&message.channel)
                .bind(&message.key)
                .bind(&message.message.id)
                .bind(Json(message.message.to_json()))
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
        let mut tx = begin(&self.pool, Scope::Tenant(&delivery.tenant)).await?;
        let row = NewDeliveryRow {
            tenant: &delivery.tenant,
            instance: &delivery.instance,
            park: delivery.park,
            kind: &delivery.kind,
            due_at: Some(delivery.due_at),
        };
        let id = insert_delivery(&mut tx, row).await?;
        tx.commit().await.map_err(db)?;
        Ok(id)
    }

    async fn due_deliveries(&self, limit: u32) -> Result<Vec<Delivery>> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE due_at <= sutra_now() ORDER BY due_at, id LIMIT $1",
        )
        .bind(i64::from(limit))
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        rows.into_iter().map(DeliveryRow::decode).collect()
    }

    async fn delivery(&self, id: DeliveryId) -> Result<Option<Delivery>> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        let row: Option<DeliveryRow> = sqlx::query_as(
            "SELECT id, tenant, instance, park, kind, payload, due_at, attempts FROM deliveries
             WHERE id = $1",
        )
        .bind(id.0)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.map(DeliveryRow::decode).transpose()
    }

    async fn defer(&self, id: DeliveryId, until: Timestamp) -> Result<()> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        sqlx::query("UPDATE deliveries SET due_at = $2, attempts = attempts + 1 WHERE id = $1")
            .bind(id.0)
            .bind(micros(until))
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn discard(&self, id: DeliveryId) -> Result<()> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        sqlx::query("DELETE FROM deliveries WHERE id = $1")
            .bind(id.0)
            .execute(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)
    }

    async fn next_due(&self) -> Result<Option<Timestamp>> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        let earliest: Option<i64> = sqlx::query_scalar("SELECT MIN(due_at) FROM deliveries")
            .fetch_one(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
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
        output: &Value,
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

    async fn list_tasks(&self, tenant: &str, filter: &TaskFilter) -> Result<Vec<TaskRecord>> {
        tasks::list(&self.pool, tenant, filter).await
    }

    fn shared_by_replicas(&self) -> bool {
        true
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
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let row: Option<InstanceRow> = sqlx::query_as(
            "SELECT snapshot, owner, fence, recoveries, created_at, updated_at FROM instances
             WHERE tenant = $1 AND id = $2",
        )
        .bind(tenant)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        row.map(InstanceRow::decode).transpose()
    }

    async fn instances(
        &self,
        tenant: &str,
        filter: &InstanceFilter,
    ) -> Result<Vec<InstanceRecord>> {
        // Only the filters given appear in the SQL, so that each combination gets a plan (and a
        // cached statement) that uses its index.
        let mut sql = QueryBuilder::<Postgres>::new(
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
            sql.push(" LIMIT ").push_bind(i64::from(filter.limit));
        }
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let rows: Vec<InstanceRow> = sql.build_query_as().fetch_all(&mut *tx).await.map_err(db)?;
        tx.commit().await.map_err(db)?;
        rows.into_iter().map(InstanceRow::decode).collect()
    }

    async fn history(&self, tenant: &str, id: &str) -> Result<Vec<HistoryEvent>> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let rows: Vec<HistoryRow> = sqlx::query_as(
            "SELECT seq, at, kind, node, token, detail FROM history
             WHERE tenant = $1 AND instance = $2 ORDER BY seq",
        )
        .bind(tenant)
        .bind(id)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        rows.into_iter().map(HistoryRow::decode).collect()
    }

    async fn tasks(&self, tenant: &str, instance: &str) -> Result<Vec<TaskRecord>> {
        tasks::of_instance(&self.pool, tenant, instance).await
    }

    async fn outbox(&self, tenant: &str, instance: &str) -> Result<Vec<OutboxRecord>> {
        let mut tx = begin(&self.pool, Scope::Tenant(tenant)).await?;
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT channel, payload, message_key, idempotency_key, instance, deployment, version,
                    attempts, sent_at, poisoned, last_error, next_attempt_at
             FROM outbox WHERE tenant = $1 AND instance = $2 ORDER BY id",
        )
        .bind(tenant)
        .bind(instance)
        .fetch_all(&mut *tx)
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        rows.into_iter().map(OutboxRow::decode).collect()
    }

    /// Readiness means the store accepts a commit: a connection, a transaction, and a primary
    /// rather than a read-only standby.
    async fn ping(&self) -> Result<()> {
        let mut tx = begin(&self.pool, Scope::System).await?;
        let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&mut *tx)
            .await
            .map_err(db)?;
        tx.commit().await.map_err(db)?;
        if standby {
            return Err(Error::Unavailable(
                "the database is a read-only standby".to_owned(),
            ));
        }
        Ok(())
    }
}
