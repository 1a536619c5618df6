//! Intake and the inbox on PostgreSQL. `buffer` is the shared script; its advisory lock on the
//! correlation key orders it with any park's commit on the same key, which SQLite's single
//! writer does for free.

use sqlx::types::Json;
use sutra_store::{BufferedMessage, Result};
use sutra_store_sql::IntakeStatements;

use crate::codec::micros;
use crate::statements::Scoped;

impl IntakeStatements for Scoped {
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
