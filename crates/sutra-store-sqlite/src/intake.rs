//! Intake and the inbox on SQLite. The lookups run alone, outside any transaction (see
//! [`crate::statements`]); `buffer` is the shared script in one write transaction, which SQLite's
//! single writer orders with every park's commit.

use sqlx::types::Json;
use sutra_store::{BufferedMessage, Result};
use sutra_store_sql::IntakeStatements;

use crate::codec::micros;
use crate::statements::Session;

impl IntakeStatements for Session {
    async fn insert_buffered(&mut self, tenant: &str, message: &BufferedMessage) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO buffered (tenant, channel, key, event_id, message, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        );
        let query = query
            .bind(tenant)
            .bind(&message.channel)
            .bind(&message.key)
            .bind(&message.message.id)
            .bind(Json(message.message.to_json()))
            .bind(micros(message.expires_at));
        self.write().await?.execute(query).await.map(drop)
    }
}
