//! The write transaction the shared scripts run in ([`Write`]), and the statements more than one
//! area runs, written once.

use jiff::Timestamp;
use sqlx::sqlite::SqliteArguments;
use sqlx::{Sqlite, SqliteConnection, Transaction};
use sutra_store::{DeliveryId, InboxAnswer, InboxEntry, Result, WaitTarget};
use sutra_store_sql::rows::{InboxRow, WaitRow};
use sutra_store_sql::{Backend, LockOn, NewDeliveryRow, Scope, Statements, params};

use crate::SqliteStore;
use crate::codec::{db, micros, now};

pub type Query<'q> = sqlx::query::Query<'q, Sqlite, SqliteArguments>;

/// A write transaction, and the one "now" every statement in it writes: the process's clock,
/// read once the write lock is held.
pub struct Write {
    tx: Transaction<'static, Sqlite>,
    now: Timestamp,
}

impl Write {
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Runs a statement in the transaction; how many rows it changed.
    pub async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        let done = query.execute(&mut *self.tx).await.map_err(db)?;
        Ok(done.rows_affected())
    }

    pub fn connection(&mut self) -> &mut SqliteConnection {
        &mut self.tx
    }
}

impl SqliteStore {
    /// Starts a write transaction holding SQLite's write lock from its first statement. A
    /// deferred `BEGIN` would take a read lock and upgrade it at the first write, and two writers
    /// upgrading at once deadlock: one of them fails at once with `SQLITE_BUSY`, busy timeout or
    /// not. Taking the lock up front makes the second writer wait its turn instead.
    pub(crate) async fn begin_write(&self) -> Result<Write> {
        let tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(db)?;
        Ok(Write { tx, now: now() })
    }
}

/// Every transaction is a write transaction; SQLite keeps no tenants apart, so the scope is the
/// scripts' business only.
impl Backend for SqliteStore {
    type Tx = Write;

    async fn begin(&self, _scope: Scope<'_>) -> Result<Write> {
        self.begin_write().await
    }
}

impl Statements for Write {
    async fn commit(self) -> Result<()> {
        self.tx.commit().await.map_err(db)
    }

    /// Nothing to take: every write transaction holds SQLite's one write lock from its `BEGIN
    /// IMMEDIATE`, which orders it with every other already.
    async fn serialize(&mut self, _on: &[LockOn<'_>]) -> Result<()> {
        Ok(())
    }

    async fn insert_delivery(&mut self, delivery: NewDeliveryRow<'_>) -> Result<DeliveryId> {
        let now = self.now;
        insert_delivery(&mut self.tx, delivery, now).await
    }

    async fn insert_inbox(&mut self, tenant: &str, entry: &InboxEntry) -> Result<bool> {
        let query = sqlx::query(
            "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)
             ON CONFLICT DO NOTHING",
        );
        let query = params::inbox(query, tenant, entry).bind(micros(self.now));
        Ok(self.execute(query).await? == 1)
    }

    async fn inbox_answer(
        &mut self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>> {
        inbox_answer(&mut self.tx, tenant, channel, event_id).await
    }

    async fn find_wait(
        &mut self,
        tenant: &str,
        channel: &str,
        key: &str,
    ) -> Result<Option<WaitTarget>> {
        find_wait(&mut self.tx, tenant, channel, key).await
    }
}

/// A delivery due at its time, or at `now` if it names none.
pub async fn insert_delivery(
    conn: &mut SqliteConnection,
    delivery: NewDeliveryRow<'_>,
    now: Timestamp,
) -> Result<DeliveryId> {
    let query = sqlx::query_scalar(
        "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         RETURNING id",
    );
    let id = params::delivery(query, &delivery)?
        .bind(micros(delivery.due_at.unwrap_or(now)))
        .bind(micros(now))
        .fetch_one(conn)
        .await
        .map_err(db)?;
    Ok(DeliveryId(id))
}

pub async fn find_wait(
    conn: &mut SqliteConnection,
    tenant: &str,
    channel: &str,
    key: &str,
) -> Result<Option<WaitTarget>> {
    let query = sqlx::query_as::<_, WaitRow>(
        "SELECT instance, park FROM waits WHERE tenant = ?1 AND channel = ?2 AND key = ?3",
    );
    params::correlation(query, tenant, channel, key)
        .fetch_optional(conn)
        .await
        .map_err(db)?
        .map(WaitRow::decode)
        .transpose()
}

pub async fn inbox_answer(
    conn: &mut SqliteConnection,
    tenant: &str,
    channel: &str,
    event_id: &str,
) -> Result<Option<InboxAnswer>> {
    let query = sqlx::query_as::<_, InboxRow>(
        "SELECT instance, status FROM inbox WHERE tenant = ?1 AND channel = ?2 AND event_id = ?3",
    );
    let row = params::inbox_key(query, tenant, channel, event_id)
        .fetch_optional(conn)
        .await
        .map_err(db)?;
    Ok(row.map(InboxRow::decode))
}
