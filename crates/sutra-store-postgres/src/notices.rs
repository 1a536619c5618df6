//! Deployment notices (SPEC §6): a deploy commits a `NOTIFY` on [`CHANNEL`] in its own
//! transaction, so every other replica hears of the new version the moment it is visible and
//! loads it without waiting for its next poll of the revision.
//!
//! The listener has a connection of its own, outside the pool: it holds it for as long as the
//! replica runs, and must not take a slot that steps need. sqlx's `PgListener` reconnects and
//! LISTENs again by itself after the connection drops; notices sent meanwhile are lost, so a
//! reconnection is reported as a notice (the engine then looks at the revision), as is the
//! `LISTEN` of a fresh listener, and an error drops the listener for a fresh one on the next call.
//! The engine's poll of the revision is the backstop for everything a listener can still miss.

use sqlx::postgres::{PgConnectOptions, PgListener, PgPool, PgPoolOptions};
use sutra_store::Result;
use tokio::sync::Mutex;

use crate::codec::db;

/// The channel deploys notify on.
pub const CHANNEL: &str = "sutra_deployments";

pub struct Notices {
    /// One connection at most, opened when the listener first listens.
    connection: PgPool,
    listener: Mutex<Option<PgListener>>,
}

impl Notices {
    pub fn new(options: PgConnectOptions) -> Notices {
        let connection = PgPoolOptions::new()
            .max_connections(1)
            .max_lifetime(None)
            .idle_timeout(None)
            .connect_lazy_with(options);
        Notices {
            connection,
            listener: Mutex::new(None),
        }
    }

    /// Waits for the next notice. With no listener up it listens and returns at once, as if
    /// notified: a deploy that committed before the `LISTEN` was never announced to it, and the
    /// caller's look at the revision finds it.
    pub async fn next(&self) -> Result<()> {
        let mut listener = self.listener.lock().await;
        let Some(listening) = listener.as_mut() else {
            *listener = Some(self.listen().await?);
            return Ok(());
        };
        match listening.try_recv().await {
            // `None`: the connection dropped and was remade; what was sent meanwhile is lost.
            Ok(_) => Ok(()),
            Err(error) => {
                *listener = None;
                Err(db(error))
            }
        }
    }

    async fn listen(&self) -> Result<PgListener> {
        let mut listener = PgListener::connect_with(&self.connection)
            .await
            .map_err(db)?;
        listener.listen(CHANNEL).await.map_err(db)?;
        Ok(listener)
    }
}
