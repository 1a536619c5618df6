//! Statements that more than one operation runs, written once, and the advisory locks that order
//! the transactions SQLite's single writer used to order for free.

use jiff::Timestamp;
use sqlx::PgConnection;
use sqlx::types::Json;
use sutra_core::snapshot::ParkId;
use sutra_store::{DeliveryId, DeliveryKind, Error, InboxAnswer, InboxEntry, Result, WaitTarget};
use xxhash_rust::xxh3::xxh3_64;

use crate::codec::{db, micros, park};
use crate::rows::{InboxRow, WaitRow};

/// What an advisory lock serializes. Each purpose hashes into its own part of the key space.
#[derive(Debug, Clone, Copy)]
pub enum LockOn<'a> {
    /// `buffer` and a park's commit on the same `(tenant, channel, key)`: whichever goes second
    /// sees what the first wrote (docs/decisions/0015).
    Correlation {
        tenant: &'a str,
        channel: &'a str,
        key: &'a str,
    },
    /// Deploys of one deployment name: version n+1 is computed from version n.
    Deployment { tenant: &'a str, name: &'a str },
}

impl LockOn<'_> {
    /// A stable 64-bit key: XXH3 is fixed by its specification, so every replica and every build
    /// computes the same key. Each part is length-prefixed, so no two tuples share an encoding.
    /// Collisions only serialize two unrelated transactions.
    pub fn key(self) -> i64 {
        let (purpose, parts) = match self {
            LockOn::Correlation {
                tenant,
                channel,
                key,
            } => ("correlation", vec![tenant, channel, key]),
            LockOn::Deployment { tenant, name } => ("deployment", vec![tenant, name]),
        };
        let mut bytes = Vec::new();
        for part in std::iter::once(purpose).chain(parts) {
            bytes.extend_from_slice(&(part.len() as u64).to_le_bytes());
            bytes.extend_from_slice(part.as_bytes());
        }
        i64::from_le_bytes(xxh3_64(&bytes).to_le_bytes())
    }
}

/// Takes transaction-scoped advisory locks, released by the commit or rollback. They are taken in
/// ascending key order in one statement, so two transactions wanting overlapping sets cannot
/// deadlock on them.
pub async fn lock(conn: &mut PgConnection, on: &[LockOn<'_>]) -> Result<()> {
    let mut keys: Vec<i64> = on.iter().map(|lock| lock.key()).collect();
    keys.sort_unstable();
    keys.dedup();
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "SELECT pg_advisory_xact_lock(key)
         FROM (SELECT key FROM unnest($1::bigint[]) AS key ORDER BY key) AS ordered",
    )
    .bind(keys)
    .execute(conn)
    .await
    .map_err(db)?;
    Ok(())
}

/// A delivery to write: due at `due_at`, or at once by the database's clock when `None`.
pub struct NewDeliveryRow<'a> {
    pub tenant: &'a str,
    pub instance: &'a str,
    pub park: ParkId,
    pub kind: &'a DeliveryKind,
    pub due_at: Option<Timestamp>,
}

pub async fn insert_delivery(
    conn: &mut PgConnection,
    row: NewDeliveryRow<'_>,
) -> Result<DeliveryId> {
    let (kind, payload) = row.kind.encode();
    let id = sqlx::query_scalar(
        "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
         VALUES ($1, $2, $3, $4, $5, COALESCE($6, sutra_now()), sutra_now())
         RETURNING id",
    )
    .bind(row.tenant)
    .bind(row.instance)
    .bind(park(row.park)?)
    .bind(kind)
    .bind(Json(payload))
    .bind(row.due_at.map(micros))
    .fetch_one(conn)
    .await
    .map_err(db)?;
    Ok(DeliveryId(id))
}

pub async fn find_wait(
    conn: &mut PgConnection,
    tenant: &str,
    channel: &str,
    key: &str,
) -> Result<Option<WaitTarget>> {
    sqlx::query_as::<_, WaitRow>(
        "SELECT instance, park FROM waits WHERE tenant = $1 AND channel = $2 AND key = $3",
    )
    .bind(tenant)
    .bind(channel)
    .bind(key)
    .fetch_optional(conn)
    .await
    .map_err(db)?
    .map(WaitRow::decode)
    .transpose()
}

pub async fn inbox_answer(
    conn: &mut PgConnection,
    tenant: &str,
    channel: &str,
    event_id: &str,
) -> Result<Option<InboxAnswer>> {
    let row = sqlx::query_as::<_, InboxRow>(
        "SELECT instance, status FROM inbox WHERE tenant = $1 AND channel = $2 AND event_id = $3",
    )
    .bind(tenant)
    .bind(channel)
    .bind(event_id)
    .fetch_optional(conn)
    .await
    .map_err(db)?;
    Ok(row.map(InboxRow::decode))
}

/// Inserts the inbox row of a message unless one exists: whoever's insert produced the row owns
/// the message. Returns the first answer when the message was consumed already.
///
/// A racing insert of the same row makes this one wait for the racer's transaction and then do
/// nothing; the lookup that follows is a new statement, so (READ COMMITTED) it sees the row the
/// racer committed.
pub async fn insert_inbox_unless_consumed(
    conn: &mut PgConnection,
    tenant: &str,
    entry: &InboxEntry,
) -> Result<Option<InboxAnswer>> {
    let inserted = sqlx::query(
        "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
         VALUES ($1, $2, $3, $4, $5, sutra_now())
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant)
    .bind(&entry.channel)
    .bind(&entry.event_id)
    .bind(&entry.answer.instance)
    .bind(&entry.answer.status)
    .execute(&mut *conn)
    .await
    .map_err(db)?
    .rows_affected();
    if inserted == 1 {
        return Ok(None);
    }
    match inbox_answer(conn, tenant, &entry.channel, &entry.event_id).await? {
        Some(first) => Ok(Some(first)),
        // Only a purge between the two statements gets here: nothing was written, so try again.
        None => Err(Error::Unavailable(format!(
            "the inbox row of `{}` on `{}` vanished while it was read",
            entry.event_id, entry.channel
        ))),
    }
}
