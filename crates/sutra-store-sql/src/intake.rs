//! Intake's script: keeping an early message (`buffer`) until a `receive` parks on its key.

use std::future::Future;

use sutra_store::{BufferedMessage, DeliveryKind, InboxAnswer, InboxEntry, Intake, Lookup, Result};

use crate::commit::insert_inbox_unless_consumed;
use crate::statements::{
    Backend, Correlation, InboxKey, LockOn, NewDeliveryRow, Scope, Statements,
};
use crate::store::SqlStore;

#[async_trait::async_trait]
impl<B: Backend> Intake for SqlStore<B> {
    #[cfg(feature = "conformance")]
    async fn find_wait(
        &self,
        tenant: &str,
        channel: &str,
        key: &str,
    ) -> Result<Option<sutra_store::WaitTarget>> {
        self.once(Scope::Tenant(tenant), async |tx| {
            tx.find_wait(Correlation {
                tenant,
                channel,
                key,
            })
            .await
        })
        .await
    }

    #[cfg(feature = "conformance")]
    async fn inbox_answer(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
    ) -> Result<Option<InboxAnswer>> {
        self.once(Scope::Tenant(tenant), async |tx| {
            tx.inbox_answer(InboxKey {
                tenant,
                channel,
                event_id,
            })
            .await
        })
        .await
    }

    async fn look_up(
        &self,
        tenant: &str,
        channel: &str,
        event_id: &str,
        key: Option<&str>,
    ) -> Result<Lookup> {
        let inbox = InboxKey {
            tenant,
            channel,
            event_id,
        };
        self.backend().look_up(inbox, key).await
    }

    /// Records the message's inbox row, then relays it to a wait armed on its key since the
    /// caller looked, or buffers it; the earlier answer if the message was consumed already.
    async fn buffer(&self, tenant: &str, message: &BufferedMessage) -> Result<Option<InboxAnswer>> {
        self.once(Scope::Tenant(tenant), async |tx| {
            // Ordered with any park on the key (see `waits::lock_waits_refusing_taken_aliases`):
            // the wait a park committed before this is seen below; a park after it sees the
            // buffered row. Taken before any row is written, so that this transaction never holds
            // a row a park's commit (which is ordered first) could wait for.
            let on = Correlation {
                tenant,
                channel: &message.channel,
                key: &message.key,
            };
            tx.serialize(&[LockOn::Correlation(on)]).await?;
            let entry = InboxEntry {
                channel: message.channel.clone(),
                event_id: message.message.id.clone(),
                answer: InboxAnswer::buffered(),
                key: None,
            };
            if let Some(first) = insert_inbox_unless_consumed(tx, tenant, &entry).await? {
                return Ok(Some(first));
            }
            // The caller found no wait, but one may have been armed since: the park's
            // transaction looked for buffered messages before this one existed, so relay to it
            // here instead.
            match tx.find_wait(on).await? {
                Some(wait) => {
                    let relay = DeliveryKind::Relay {
                        message: message.message.clone(),
                    };
                    let row = NewDeliveryRow {
                        tenant,
                        instance: &wait.instance,
                        park: wait.park,
                        kind: &relay,
                        due_at: None,
                    };
                    tx.insert_delivery(row).await?;
                }
                None => tx.insert_buffered(tenant, message).await?,
            }
            Ok(None)
        })
        .await
    }
}

/// The statements of intake's script (`intake`).
pub trait IntakeStatements: Statements {
    /// The message's first answer if it was consumed, and otherwise the wait on `key` (of the
    /// message's tenant and channel), if any. This reads the inbox, then the waits; a backend
    /// whose statements are round trips reads both in one.
    fn look_up(
        &mut self,
        inbox: InboxKey<'_>,
        key: Option<&str>,
    ) -> impl Future<Output = Result<Lookup>> + Send {
        look_up_each(self, inbox, key)
    }

    fn insert_buffered(
        &mut self,
        tenant: &str,
        message: &BufferedMessage,
    ) -> impl Future<Output = Result<()>> + Send;
}

/// [`IntakeStatements::look_up`] one statement at a time.
async fn look_up_each<T: Statements>(
    tx: &mut T,
    inbox: InboxKey<'_>,
    key: Option<&str>,
) -> Result<Lookup> {
    if let Some(answer) = tx.inbox_answer(inbox).await? {
        return Ok(Lookup {
            answer: Some(answer),
            wait: None,
        });
    }
    let wait = match key {
        Some(key) => {
            tx.find_wait(Correlation {
                tenant: inbox.tenant,
                channel: inbox.channel,
                key,
            })
            .await?
        }
        None => None,
    };
    Ok(Lookup { answer: None, wait })
}
