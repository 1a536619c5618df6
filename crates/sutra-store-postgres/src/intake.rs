//! Intake and the inbox on PostgreSQL. `buffer` is the shared script
//! ([`sutra_store_sql::intake`]); its advisory lock on the correlation key orders it with any
//! park's commit on the same key, which SQLite's single writer does for free.

use sutra_store::{BufferedMessage, InboxAnswer, Intake, Result, WaitTarget};
use sutra_store_sql::{Backend, IntakeStatements, Scope, Statements, params};

use crate::PostgresStore;
use crate::statements::Scoped;

#[async_trait::async_trait]
impl Intake for PostgresStore {
    async fn find_wait(
        &self,
        tenant: &str,
        channel: &str,
        key: &str,
    ) -> Result<Option<WaitTarget>> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let wait = tx.find_wait(tenant, channel, key).await?;
        tx.commit().await?;
        Ok(wait)
    }

    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>> {
        let mut tx = self.begin(Scope::Tenant(tenant)).await?;
        let answer = tx.inbox_answer(tenant, channel, event_id).await?;
        tx.commit().await?;
        Ok(answer)
    }

    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>> {
        sutra_store_sql::intake::buffer(self, tenant, message).await
    }
}

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
