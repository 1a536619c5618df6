//! Intake and the inbox on SQLite. The lookups read outside any transaction; `buffer` is the
//! shared script ([`sutra_store_sql::intake`]) in one write transaction, which SQLite's single
//! writer orders with every park's commit.

use sutra_store::{BufferedMessage, InboxAnswer, Intake, Result, WaitTarget};
use sutra_store_sql::{IntakeStatements, params};

use crate::SqliteStore;
use crate::codec::db;
use crate::statements::{Write, find_wait, inbox_answer};

#[async_trait::async_trait]
impl Intake for SqliteStore {
    async fn find_wait(
        &self,
        tenant: &str,
        channel: &str,
        key: &str,
    ) -> Result<Option<WaitTarget>> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        find_wait(&mut conn, tenant, channel, key).await
    }

    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>> {
        let mut conn = self.pool.acquire().await.map_err(db)?;
        inbox_answer(&mut conn, tenant, channel, event_id).await
    }

    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>> {
        sutra_store_sql::intake::buffer(self, tenant, message).await
    }
}

impl IntakeStatements for Write {
    async fn insert_buffered(&mut self, tenant: &str, message: &BufferedMessage) -> Result<()> {
        let query = sqlx::query(
            "INSERT INTO buffered (tenant, channel, key, event_id, message, expires_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        );
        let query = params::buffered(query, tenant, message);
        self.execute(query).await.map(drop)
    }
}
