//! The transaction the shared scripts run in ([`Scoped`]), the statements more than one area
//! runs, and the advisory locks that order the transactions SQLite's single writer orders for
//! free.

use std::time::Duration;

use sqlx::postgres::PgArguments;
use sqlx::types::Json;
use sqlx::{AssertSqlSafe, PgConnection, PgPool};
use sutra_store::{DeliveryId, EndNotice, InboxAnswer, InboxEntry, Lookup, Result, WaitTarget};
use sutra_store_sql::rows::{InboxRow, WaitRow};
use sutra_store_sql::{Backend, Correlation, InboxKey, LockOn, NewDeliveryRow, Scope, Statements};
use tracing::warn;
use xxhash_rust::xxh3::xxh3_64;

use crate::Postgres;
use crate::codec::{db, micros, park};
use crate::notices::{self, Heard};
use crate::scope::{Flush, SYSTEM, Tx, begin, declare};

pub type Query<'q> = sqlx::query::Query<'q, sqlx::Postgres, PgArguments>;

/// A transaction scoped to a tenant, or to the system (see [`crate::scope`]).
pub struct Scoped {
    tx: Tx,
    /// Whom the transaction acts for now: the scope it began in, then each group member's
    /// tenant ([`Statements::begin_member`]).
    acting_for: String,
}

impl Scoped {
    async fn begin(
        pool: &PgPool,
        scope: Scope<'_>,
        flush: Flush,
        bound: Option<Duration>,
    ) -> Result<Scoped> {
        let tx = begin(pool, scope, flush, bound).await?;
        let acting_for = match scope {
            Scope::Tenant(tenant) => tenant.to_owned(),
            Scope::System => SYSTEM.to_owned(),
        };
        Ok(Scoped { tx, acting_for })
    }

    /// Runs a statement in the transaction; how many rows it changed.
    pub async fn execute(&mut self, query: Query<'_>) -> Result<u64> {
        let done = query.execute(&mut *self.tx).await.map_err(db)?;
        Ok(done.rows_affected())
    }

    pub fn connection(&mut self) -> &mut PgConnection {
        &mut self.tx
    }
}

/// A message's inbox row unless it has one ([`Statements::insert_inbox`]).
const INBOX_UNLESS_THERE: &str =
    "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
     VALUES ($1, $2, $3, $4, $5, sutra_now())
     ON CONFLICT DO NOTHING";

impl Postgres {
    /// The pool a scope's transactions run in: the system's work as the system's role, which
    /// alone `'*'` shows rows to (migration 0011).
    fn pool_for(&self, scope: Scope<'_>) -> &PgPool {
        match scope {
            Scope::Tenant(_) => &self.pool,
            Scope::System => &self.system,
        }
    }

    /// A transaction in `scope`'s pool. One acting for a tenant — every claim is taken in one —
    /// has its statements bounded by the step statement timeout; the system's work is not:
    /// it takes no claim, and some of it (purge, the outbox) grows with the backlog it clears.
    async fn scoped(&self, scope: Scope<'_>, flush: Flush) -> Result<Scoped> {
        let bound = match scope {
            Scope::Tenant(_) => self.step_statement_timeout,
            Scope::System => None,
        };
        Scoped::begin(self.pool_for(scope), scope, flush, bound).await
    }
}

impl Backend for Postgres {
    type Tx = Scoped;

    async fn begin(&self, scope: Scope<'_>) -> Result<Scoped> {
        self.scoped(scope, Flush::Wait).await
    }

    /// A commit answered before its WAL is flushed: a poll's is one of the most frequent on the
    /// task path, and a lost lock only hands its task out again.
    async fn begin_redoable(&self, scope: Scope<'_>) -> Result<Scoped> {
        self.scoped(scope, Flush::Later).await
    }

    /// One round trip ([`Postgres::look_up_at_once`]) rather than a transaction's three.
    async fn look_up(&self, inbox: InboxKey<'_>, key: Option<&str>) -> Result<Lookup> {
        self.look_up_at_once(inbox, key).await
    }

    /// The one database of a fleet of replicas: its singleton roles are led by one replica at a
    /// time.
    fn shared_by_replicas(&self) -> bool {
        true
    }

    /// The next notice on the deployments' listener (see [`crate::notices`]); any notice, or
    /// a (re)started listener, is a reason to look at the revision.
    async fn deployment_notice(&self) -> Result<()> {
        self.deployments.next().await.map(drop)
    }

    /// The next notice on the ends' listener that names instances, or its (re)start. A payload
    /// no replica of this build sends is logged and skipped.
    async fn end_notice(&self) -> Result<EndNotice> {
        loop {
            match self.ended.next().await? {
                Heard::Listening => return Ok(EndNotice::Listening),
                Heard::Notice(payload) => match notices::ended(&payload) {
                    Some(notice) => return Ok(notice),
                    None => warn!(payload, "an end notice that names no instances; ignored"),
                },
            }
        }
    }
}

impl Statements for Scoped {
    async fn commit(self) -> Result<()> {
        self.tx.commit().await.map_err(db)
    }

    async fn rollback(self) -> Result<()> {
        self.tx.rollback().await.map_err(db)
    }

    /// Declares the member's tenant, unless the transaction acts for it already: members of
    /// one tenant cost no round trip between them.
    async fn begin_member(&mut self, tenant: &str) -> Result<()> {
        if self.acting_for == tenant {
            return Ok(());
        }
        // Safe: the only dynamic part is a literal quoted by `declare`.
        sqlx::raw_sql(AssertSqlSafe(declare(tenant)?))
            .execute(&mut *self.tx)
            .await
            .map_err(db)?;
        tenant.clone_into(&mut self.acting_for);
        Ok(())
    }

    /// Takes transaction-scoped advisory locks, released by the commit or rollback. They are
    /// taken in ascending key order in one statement, so two transactions wanting overlapping
    /// sets cannot deadlock on them.
    async fn serialize(&mut self, on: &[LockOn<'_>]) -> Result<()> {
        let keys = advisory_keys(on.iter().copied());
        if keys.is_empty() {
            return Ok(());
        }
        let query = sqlx::query(
            "SELECT pg_advisory_xact_lock(key)
             FROM (SELECT key FROM unnest($1::bigint[]) AS key ORDER BY key) AS ordered",
        )
        .bind(keys);
        self.execute(query).await.map(drop)
    }

    async fn insert_delivery(&mut self, row: NewDeliveryRow<'_>) -> Result<DeliveryId> {
        let query = sqlx::query_scalar(
            "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             VALUES ($1, $2, $3, $4, $5, COALESCE($6, sutra_now()), sutra_now())
             RETURNING id",
        );
        let (kind, payload) = row.kind.encode();
        let id = query
            .bind(row.tenant)
            .bind(row.instance)
            .bind(park(row.park)?)
            .bind(kind)
            .bind(Json(payload))
            .bind(row.due_at.map(micros))
            .fetch_one(self.connection())
            .await
            .map_err(db)?;
        Ok(DeliveryId(id))
    }

    /// A racing insert of the same row makes this one wait for the racer's transaction and then
    /// do nothing; the lookup that follows is a new statement, so (READ COMMITTED) it sees the
    /// row the racer committed.
    async fn insert_inbox(&mut self, tenant: &str, entry: &InboxEntry) -> Result<bool> {
        let query = sqlx::query(INBOX_UNLESS_THERE)
            .bind(tenant)
            .bind(&entry.channel)
            .bind(&entry.event_id)
            .bind(entry.answer.instance.as_deref())
            .bind(&entry.answer.status);
        Ok(self.execute(query).await? == 1)
    }

    async fn inbox_answer(&mut self, key: InboxKey<'_>) -> Result<Option<InboxAnswer>> {
        let query = sqlx::query_as::<_, InboxRow>(
            "SELECT instance, status FROM inbox WHERE tenant = $1 AND channel = $2 AND event_id = $3",
        );
        let row = query
            .bind(key.tenant)
            .bind(key.channel)
            .bind(key.event_id)
            .fetch_optional(self.connection())
            .await
            .map_err(db)?;
        Ok(row.map(InboxRow::decode))
    }

    async fn find_wait(&mut self, on: Correlation<'_>) -> Result<Option<WaitTarget>> {
        let query = sqlx::query_as::<_, WaitRow>(
            "SELECT instance, park FROM waits WHERE tenant = $1 AND channel = $2 AND key = $3",
        );
        query
            .bind(on.tenant)
            .bind(on.channel)
            .bind(on.key)
            .fetch_optional(self.connection())
            .await
            .map_err(db)?
            .map(WaitRow::decode)
            .transpose()
    }
}

/// The advisory keys of `on`, each once, in the ascending order every statement takes them in.
pub(crate) fn advisory_keys<'a>(on: impl Iterator<Item = LockOn<'a>>) -> Vec<i64> {
    let mut keys: Vec<i64> = on.map(advisory_key).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

/// A stable 64-bit key: XXH3 is fixed by its specification, so every replica and every build
/// computes the same key. Each part is length-prefixed, so no two tuples share an encoding, and
/// each purpose hashes into its own part of the key space. Collisions only serialize two
/// unrelated transactions.
fn advisory_key(lock: LockOn<'_>) -> i64 {
    let (purpose, parts) = match lock {
        LockOn::Correlation(Correlation {
            tenant,
            channel,
            key,
        }) => ("correlation", vec![tenant, channel, key]),
        LockOn::Deployment { tenant, name } => ("deployment", vec![tenant, name]),
    };
    let mut bytes = Vec::new();
    for part in std::iter::once(purpose).chain(parts) {
        bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
        bytes.extend_from_slice(part.as_bytes());
    }
    i64::from_le_bytes(xxh3_64(&bytes).to_le_bytes())
}
