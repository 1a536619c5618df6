//! Statements that more than one operation runs, written once.

use jiff::Timestamp;
use sqlx::{Sqlite, SqliteConnection, SqlitePool, Transaction};
use sutra_store::{DeliveryId, InboxAnswer, InboxEntry, NewDelivery, Result, WaitTarget};

use crate::codec::{db, micros, park};
use crate::rows::{InboxRow, WaitRow};

/// Starts a write transaction holding SQLite's write lock from its first statement. A deferred
/// `BEGIN` would take a read lock and upgrade it at the first write, and two writers upgrading at
/// once deadlock: one of them fails at once with `SQLITE_BUSY`, busy timeout or not. Taking the
/// lock up front makes the second writer wait its turn instead.
pub async fn begin_write(pool: &SqlitePool) -> Result<Transaction<'static, Sqlite>> {
    pool.begin_with("BEGIN IMMEDIATE").await.map_err(db)
}

pub async fn insert_delivery(
    conn: &mut SqliteConnection,
    delivery: &NewDelivery,
    now: Timestamp,
) -> Result<DeliveryId> {
    let (kind, payload) = delivery.kind.encode();
    let id = sqlx::query_scalar(
        "INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         RETURNING id",
    )
    .bind(&delivery.tenant)
    .bind(&delivery.instance)
    .bind(park(delivery.park)?)
    .bind(kind)
    .bind(payload.to_string())
    .bind(micros(delivery.due_at))
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
    sqlx::query_as::<_, WaitRow>(
        "SELECT instance, park FROM waits WHERE tenant = ?1 AND channel = ?2 AND key = ?3",
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
    conn: &mut SqliteConnection,
    tenant: &str,
    channel: &str,
    event_id: &str,
) -> Result<Option<InboxAnswer>> {
    let row = sqlx::query_as::<_, InboxRow>(
        "SELECT instance, status FROM inbox WHERE tenant = ?1 AND channel = ?2 AND event_id = ?3",
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
pub async fn insert_inbox_unless_consumed(
    conn: &mut SqliteConnection,
    tenant: &str,
    entry: &InboxEntry,
    now: Timestamp,
) -> Result<Option<InboxAnswer>> {
    let inserted = sqlx::query(
        "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT DO NOTHING",
    )
    .bind(tenant)
    .bind(&entry.channel)
    .bind(&entry.event_id)
    .bind(&entry.answer.instance)
    .bind(&entry.answer.status)
    .bind(micros(now))
    .execute(&mut *conn)
    .await
    .map_err(db)?
    .rows_affected();
    if inserted == 1 {
        return Ok(None);
    }
    inbox_answer(conn, tenant, &entry.channel, &entry.event_id).await
}
