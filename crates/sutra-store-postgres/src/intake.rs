//! Intake and the inbox on PostgreSQL. `buffer` is the shared script; its advisory lock on the
//! correlation key orders it with any park's commit on the same key, which SQLite's single
//! writer does for free.

use sutra_store::{BufferedMessage, Result};
use sutra_store_sql::{IntakeStatements, params};

use crate::statements::Scoped;

impl IntakeStatements for Scoped {
    async fn insert_buffered(&mut self, tenant: &str, message: &BufferedMessage) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO buffered (tenant, channel, key, event_id, message, expires_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        );
        let query = params::buffered(query, tenant, message);
        self.execute(query).await.map(drop)
    }
}
