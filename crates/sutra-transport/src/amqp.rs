//! AMQP 0-9-1 (RabbitMQ): an outbox row published to its channel's exchange (`""`, the default
//! exchange, unless the channel names one) with its routing key (the channel's `routing-key`,
//! else its `queue`), as a CloudEvents structured-mode body.
//!
//! The row counts as sent only when the broker confirms it (publisher confirms): a persistent
//! message (delivery mode 2) the broker took responsibility for. It is published `mandatory`, so
//! a message no queue is bound to receive comes back, and is a failed send rather than a silent
//! drop. The row's idempotency key is the message's `message_id` and the event's `id`, the same
//! on every attempt, so a consumer deduplicates a resend after a crash.
//!
//! One connection and one confirming channel per process, made on the first send and again after
//! a failure: a broker that went away costs the sends made while it is away (they back off like
//! any failed send), never a restart. Plain `amqp://` only: the client is built without TLS.

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::types::ShortString;
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties};
use sutra_core::model::Channel;
use sutra_store::{OutboxRow, SendError};
use tokio::sync::Mutex;

use crate::broker::redacted;
use crate::cloud_event::{self, cloud_event};

/// AMQP's persistent delivery mode: the broker writes the message to disk before confirming it.
const PERSISTENT: u8 = 2;

pub struct Amqp {
    url: String,
    link: Mutex<Option<Link>>,
}

/// The connection and the channel sends share; the connection must live as long as the channel.
struct Link {
    _connection: Connection,
    channel: lapin::Channel,
}

impl Amqp {
    pub fn new(url: String) -> Amqp {
        Amqp {
            url,
            link: Mutex::new(None),
        }
    }

    pub async fn send(&self, channel: &Channel, row: &OutboxRow) -> Result<(), SendError> {
        // The checker refuses an amqp channel with neither a queue nor a routing key.
        let routing_key = channel.amqp_routing_key().ok_or_else(|| {
            SendError(format!(
                "amqp channel `{}` has no queue or routing-key",
                channel.name
            ))
        })?;
        let publisher = self.channel().await?;
        let published = publish(&publisher, channel, routing_key, row).await;
        if let Err(PublishError::Broken(_)) = &published {
            // The next send connects again.
            self.link.lock().await.take();
        }
        published.map_err(|error| {
            SendError(format!(
                "publish to exchange `{}` with routing key `{routing_key}`: {}",
                channel.exchange,
                error.reason()
            ))
        })
    }

    /// The shared confirming channel, connected first if it is not (or no longer) up.
    async fn channel(&self) -> Result<lapin::Channel, SendError> {
        let mut link = self.link.lock().await;
        if let Some(up) = link
            .as_ref()
            .filter(|link| link.channel.status().connected())
        {
            return Ok(up.channel.clone());
        }
        let connected = connect(&self.url).await.map_err(|error| {
            SendError(format!(
                "cannot connect to the AMQP broker at {}: {error}",
                redacted(&self.url)
            ))
        })?;
        let channel = connected.channel.clone();
        *link = Some(connected);
        Ok(channel)
    }
}

async fn connect(url: &str) -> Result<Link, lapin::Error> {
    let connection = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    Ok(Link {
        _connection: connection,
        channel,
    })
}

enum PublishError {
    /// The channel or connection failed: it is dropped.
    Broken(lapin::Error),
    /// The broker answered, and did not take the message.
    Refused(String),
}

impl PublishError {
    fn reason(&self) -> String {
        match self {
            PublishError::Broken(error) => error.to_string(),
            PublishError::Refused(reason) => reason.clone(),
        }
    }
}

async fn publish(
    publisher: &lapin::Channel,
    channel: &Channel,
    routing_key: &str,
    row: &OutboxRow,
) -> Result<(), PublishError> {
    let body = cloud_event(row).to_string();
    let properties = BasicProperties::default()
        .with_message_id(ShortString::from(row.entry.idempotency_key.clone()))
        .with_content_type(ShortString::from(cloud_event::CONTENT_TYPE))
        .with_delivery_mode(PERSISTENT);
    let options = BasicPublishOptions {
        mandatory: true,
        ..BasicPublishOptions::default()
    };
    let confirm = publisher
        .basic_publish(
            ShortString::from(channel.exchange.clone()),
            ShortString::from(routing_key),
            options,
            body.as_bytes(),
            properties,
        )
        .await
        .map_err(PublishError::Broken)?;
    match confirm.await.map_err(PublishError::Broken)? {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(_)) => Err(PublishError::Refused(
            "the broker routed the message to no queue (is a queue bound to this exchange and \
             routing key?)"
                .into(),
        )),
        Confirmation::Nack(_) => Err(PublishError::Refused(
            "the broker refused the message (negative confirm)".into(),
        )),
        Confirmation::NotRequested => Err(PublishError::Refused(
            "the broker did not confirm the message".into(),
        )),
    }
}
