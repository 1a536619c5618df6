//! Intake and the inbox on PostgreSQL. `buffer` is the shared script; its advisory lock on the
//! correlation key orders it with any park's commit on the same key, which SQLite's single
//! writer does for free.

use sqlx::types::Json;
use sutra_store::{BufferedMessage, InboxAnswer, Lookup, Result};
use sutra_store_sql::rows::WaitRow;
use sutra_store_sql::{InboxKey, IntakeStatements};

use crate::codec::{db, micros};
use crate::statements::Scoped;

impl IntakeStatements for Scoped {
    /// One statement, one snapshot for both reads.
    async fn look_up(&mut self, inbox: InboxKey<'_>, key: Option<&str>) -> Result<Lookup> {
        type Row = (Option<String>, Option<String>, Option<String>, Option<i64>);
        let (answered, status, waiting, park): Row = sqlx::query_as(
            "SELECT inbox.instance, inbox.status, waits.instance, waits.park
             FROM (SELECT 1) AS one
             LEFT JOIN inbox ON inbox.tenant = $1 AND inbox.channel = $2
                            AND inbox.event_id = $3
             LEFT JOIN waits ON waits.tenant = $1 AND waits.channel = $2 AND waits.key = $4",
        )
        .bind(inbox.tenant)
        .bind(inbox.channel)
        .bind(inbox.event_id)
        .bind(key)
        .fetch_one(self.connection())
        .await
        .map_err(db)?;
        if let Some(status) = status {
            return Ok(Lookup {
                answer: Some(InboxAnswer {
                    instance: answered,
                    status,
                }),
                wait: None,
            });
        }
        Ok(Lookup {
            answer: None,
            wait: WaitRow::joined(waiting, park)?,
        })
    }

    async fn insert_buffered(&mut self, tenant: &str, message: &BufferedMessage) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO buffered (tenant, channel, key, event_id, message, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        );
        let query = query
            .bind(tenant)
            .bind(&message.channel)
            .bind(&message.key)
            .bind(&message.message.id)
            .bind(Json(message.message.to_json()))
            .bind(micros(message.expires_at));
        self.execute(query).await.map(drop)
    }
}
