//! Intake and the inbox on PostgreSQL. `buffer` is the shared script; its advisory lock on the
//! correlation key orders it with any park's commit on the same key, which SQLite's single
//! writer does for free. A message's look-up is one round trip ([`Postgres::look_up_at_once`]).

use sqlx::types::Json;
use sqlx::{AssertSqlSafe, FromRow};
use sutra_store::{BufferedMessage, Error, InboxAnswer, Lookup, Result};
use sutra_store_sql::rows::WaitRow;
use sutra_store_sql::{InboxKey, IntakeStatements};

use crate::Postgres;
use crate::codec::{db, micros};
use crate::scope::{implicit_scope, literal};
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

impl Postgres {
    /// A message's look-up in one simple-protocol message, one round trip (decision 0073): the
    /// scope's declaration and bound and the read run in the implicit transaction PostgreSQL
    /// gives a message of several statements, which ends with the message — no `BEGIN` or
    /// `COMMIT` of their own. One snapshot for both reads: an answered message wins over a
    /// wait. Such a message carries no bind parameters, so the message's channel, id and key
    /// travel as literals, quoted as the tenant is ([`literal`]); the statement is planned at
    /// each call (0.07 ms measured), less than the two round trips it saves.
    pub(crate) async fn look_up_at_once(
        &self,
        inbox: InboxKey<'_>,
        key: Option<&str>,
    ) -> Result<Lookup> {
        let (tenant, channel) = (literal(inbox.tenant)?, literal(inbox.channel)?);
        let key = key.map_or(Ok("NULL".to_owned()), literal)?;
        let sql = format!(
            "{scope};
             SELECT inbox.instance, inbox.status, waits.instance, waits.park
             FROM (SELECT 1) AS one
             LEFT JOIN inbox ON inbox.tenant = {tenant} AND inbox.channel = {channel}
                            AND inbox.event_id = {event}
             LEFT JOIN waits ON waits.tenant = {tenant} AND waits.channel = {channel}
                            AND waits.key = {key}",
            scope = implicit_scope(inbox.tenant, self.step_statement_timeout)?,
            event = literal(inbox.event_id)?,
        );
        type Row = (Option<String>, Option<String>, Option<String>, Option<i64>);
        // Safe: every dynamic part is a literal quoted by `literal`.
        let rows = sqlx::raw_sql(AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await
            .map_err(db)?;
        // The declaration's row first, then the look-up's.
        let row = rows.last().filter(|_| rows.len() == 2).ok_or_else(|| {
            Error::Corrupt(format!(
                "a message's look-up answered {} rows, not the declaration's and its own",
                rows.len()
            ))
        })?;
        let (answered, status, waiting, park) = Row::from_row(row).map_err(db)?;
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
}
