//! The unit of work the shared scripts run in ([`Session`]), and the statements more than one
//! area runs, written once.

use jiff::Timestamp;
use sqlx::pool::PoolConnection;
use sqlx::sqlite::{SqliteArguments, SqlitePool, SqliteRow};
use sqlx::types::Json;
use sqlx::{FromRow, SqliteConnection, Transaction};
use sutra_store::{Clock, DeliveryId, InboxAnswer, InboxEntry, Result, WaitTarget};
use sutra_store_sql::rows::{InboxRow, WaitRow};
use sutra_store_sql::{Backend, Correlation, InboxKey, LockOn, NewDeliveryRow, Scope, Statements};

use crate::Sqlite;
use crate::codec::{db, micros, park};
use crate::holdings::Held;

pub type Query<'q> = sqlx::query::Query<'q, sqlx::Sqlite, SqliteArguments>;
pub type QueryAs<'q, O> = sqlx::query::QueryAs<'q, sqlx::Sqlite, O, SqliteArguments>;

/// A unit of work on SQLite. The statements that write (and the reads a write must see
/// unchanged) run in one write transaction, begun by the first of them ([`Session::write`]). A
/// statement atomic on its own — a claim, a release, a read — runs inside that transaction once
/// it is begun, and otherwise alone, as SQLite runs any statement outside a transaction
/// ([`Session::connection`]): it waits for nothing but the write lock, and a read not even for
/// that.
pub struct Session {
    pool: SqlitePool,
    clock: Clock,
    write: Option<Write>,
    alone: Option<PoolConnection<sqlx::Sqlite>>,
    /// The instances this session claimed, and those other sessions of this process held as it
    /// began; after `write`, so that its transaction is ended before its claims are let go.
    pub(crate) held: Held,
}

/// A write transaction, and the one "now" every statement in it writes: the store's clock,
/// read once the write lock is held.
pub struct Write {
    tx: Transaction<'static, sqlx::Sqlite>,
    now: Timestamp,
}

impl Session {
    /// The write transaction, begun by the first statement that needs it, holding SQLite's write
    /// lock from its first statement. A deferred `BEGIN` would take a read lock and upgrade it at
    /// the first write, and two writers upgrading at once deadlock: one of them fails at once
    /// with `SQLITE_BUSY`, busy timeout or not. Taking the lock up front makes the second writer
    /// wait its turn instead.
    pub async fn write(&mut self) -> Result<&mut Write> {
        match &mut self.write {
            Some(write) => Ok(write),
            unbegun @ None => {
                // Back to the pool first: an in-memory database has one connection.
                self.alone = None;
                let tx = self.pool.begin_with("BEGIN IMMEDIATE").await.map_err(db)?;
                let now = self.clock.now();
                Ok(unbegun.insert(Write { tx, now }))
            }
        }
    }

    /// Where a statement atomic on its own runs: in the write transaction once it is begun, so
    /// that the statement sees what the transaction wrote; otherwise alone on a pooled
    /// connection.
    pub async fn connection(&mut self) -> Result<&mut SqliteConnection> {
        if let Some(write) = &mut self.write {
            return Ok(&mut write.tx);
        }
        match &mut self.alone {
            Some(alone) => Ok(alone),
            none @ None => Ok(none.insert(self.pool.acquire().await.map_err(db)?)),
        }
    }

    /// Reads rows with a statement run alone, or in the write transaction once it is begun.
    pub async fn fetch_all<O>(&mut self, query: QueryAs<'_, O>) -> Result<Vec<O>>
    where
        O: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        query.fetch_all(self.connection().await?).await.map_err(db)
    }

    /// Reads a row, if any, like [`Session::fetch_all`].
    pub async fn fetch_optional<O>(&mut self, query: QueryAs<'_, O>) -> Result<Option<O>>
    where
        O: for<'r> FromRow<'r, SqliteRow> + Send + Unpin,
    {
        query
            .fetch_optional(self.connection().await?)
            .await
            .map_err(db)
    }

    /// The write transaction's "now", or the clock's for a statement alone.
    pub fn now(&self) -> Timestamp {
        match &self.write {
            Some(write) => write.now,
            None => self.clock.now(),
        }
    }

    /// Runs a statement alone, or in the write transaction once it is begun; how many rows it
    /// changed.
    pub async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        let done = query.execute(self.connection().await?).await.map_err(db)?;
        Ok(done.rows_affected())
    }
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

/// A message's inbox row unless it has one ([`Statements::insert_inbox`]).
const INBOX_UNLESS_THERE: &str =
    "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT DO NOTHING";

/// A consumed message's inbox row, over whatever row it had
/// ([`sutra_store_sql::StepRows::consumed`]).
pub const INBOX_CONSUMED: &str =
    "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
     ON CONFLICT (tenant, channel, event_id)
     DO UPDATE SET instance = excluded.instance, status = excluded.status";

impl Session {
    /// Writes a message's inbox row by `sql` ([`INBOX_UNLESS_THERE`] or [`INBOX_CONSUMED`]):
    /// tenant, channel, event id, the answer's instance and status, received now. How many rows
    /// it wrote.
    pub async fn write_inbox(
        &mut self,
        sql: &'static str,
        tenant: &str,
        entry: &InboxEntry,
    ) -> Result<u64> {
        let tx = self.write().await?;
        let query = sqlx::query(sql)
            .bind(tenant)
            .bind(&entry.channel)
            .bind(&entry.event_id)
            .bind(entry.answer.instance.as_deref())
            .bind(&entry.answer.status)
            .bind(micros(tx.now()));
        tx.execute(query).await
    }
}

/// SQLite keeps no tenants apart, so the scope is the scripts' business only.
impl Backend for Sqlite {
    type Tx = Session;

    async fn begin(&self, _scope: Scope<'_>) -> Result<Session> {
        Ok(Session {
            pool: self.pool.clone(),
            clock: self.clock.clone(),
            write: None,
            alone: None,
            held: Held::begin(&self.holdings),
        })
    }

    /// A SQLite file belongs to one `sutra serve`; a second process on the same file leads every
    /// role too (SPEC §6), kept correct by the claims alone.
    fn shared_by_replicas(&self) -> bool {
        false
    }

    fn clock(&self) -> Clock {
        self.clock.clone()
    }

    // Nothing announces a deploy: every process on a file stored it or polls the revision.
}

impl Statements for Session {
    /// Commits the write transaction, if a statement began one; a statement alone committed as
    /// it ran.
    async fn commit(self) -> Result<()> {
        match self.write {
            Some(write) => write.tx.commit().await.map_err(db),
            None => Ok(()),
        }
    }

    async fn rollback(self) -> Result<()> {
        match self.write {
            Some(write) => write.tx.rollback().await.map_err(db),
            None => Ok(()),
        }
    }

    /// The write transaction, begun if need be, so that a group holds the write lock — every
    /// row's lock, on SQLite — from its first member's claim. The tenant is the scripts' business.
    async fn begin_member(&mut self, _tenant: &str) -> Result<()> {
        self.write().await.map(drop)
    }

    /// Nothing to take: every write transaction holds SQLite's one write lock from its `BEGIN
    /// IMMEDIATE`, which orders it with every other already.
    async fn serialize(&mut self, _on: &[LockOn<'_>]) -> Result<()> {
        Ok(())
    }

    /// A delivery due at its time, or at now if it names none.
    async fn insert_delivery(&mut self, delivery: NewDeliveryRow<'_>) -> Result<DeliveryId> {
        let now = self.now();
        let query = sqlx::query_scalar(
            "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             RETURNING id",
        );
        let (kind, payload) = delivery.kind.encode();
        let id = query
            .bind(delivery.tenant)
            .bind(delivery.instance)
            .bind(park(delivery.park)?)
            .bind(kind)
            .bind(Json(payload))
            .bind(micros(delivery.due_at.unwrap_or(now)))
            .bind(micros(now))
            .fetch_one(self.connection().await?)
            .await
            .map_err(db)?;
        Ok(DeliveryId(id))
    }

    async fn insert_inbox(&mut self, tenant: &str, entry: &InboxEntry) -> Result<bool> {
        Ok(self.write_inbox(INBOX_UNLESS_THERE, tenant, entry).await? == 1)
    }

    async fn inbox_answer(&mut self, key: InboxKey<'_>) -> Result<Option<InboxAnswer>> {
        let query = sqlx::query_as::<_, InboxRow>(
            "SELECT instance, status FROM inbox WHERE tenant = ?1 AND channel = ?2 AND event_id = ?3",
        );
        let row = query
            .bind(key.tenant)
            .bind(key.channel)
            .bind(key.event_id)
            .fetch_optional(self.connection().await?)
            .await
            .map_err(db)?;
        Ok(row.map(InboxRow::decode))
    }

    async fn find_wait(&mut self, on: Correlation<'_>) -> Result<Option<WaitTarget>> {
        let query = sqlx::query_as::<_, WaitRow>(
            "SELECT instance, park FROM waits WHERE tenant = ?1 AND channel = ?2 AND key = ?3",
        );
        query
            .bind(on.tenant)
            .bind(on.channel)
            .bind(on.key)
            .fetch_optional(self.connection().await?)
            .await
            .map_err(db)?
            .map(WaitRow::decode)
            .transpose()
    }
}
