//! Intake (SPEC §5.1): a decoded message on a channel → validate → correlate → dedup → relay,
//! start, buffer or refuse.
//!
//! Decoding is the transport's job (CloudEvents over HTTP, a broker's envelope); everything from
//! validation on is the same for every transport, and lives here. Resolution (validation and
//! correlation) happens on the caller's task, where the message arrived; only the race-sensitive
//! part — claim, load, apply, commit — is handed to the instance's lane, in one hop.

use jiff::Timestamp;
use sutra_core::expr::{Bindings, KEY_BYTES_MAX, MESSAGE_ROOTS};
use sutra_core::model::{Ack, Channel, Transport};
use sutra_core::snapshot::InstanceInfo;
use sutra_core::step::{Event, Message, Reply};
use sutra_core::storable::nul_pointers;
use sutra_store::{BufferedMessage, InboxAnswer, InstanceKey, WaitTarget};

use crate::error::Error;
use crate::history_log;
use crate::lane::Lanes;
use crate::metrics::{self, BouncePath};
use crate::registry::{ChannelRoute, Live};
use crate::request::{Consumed, StepOutcome, StepRequest, Work};
use crate::shared::Shared;

/// A decoded message on a channel, and the transport it arrived by.
#[derive(Debug, Clone)]
pub struct Inbound {
    pub tenant: String,
    pub channel: String,
    pub message: Message,
    pub via: Transport,
}

/// How the transport answers its caller.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// The step that consumed the message committed (`ack: commit`), or the message was
    /// consumed before (`dedup`), or kept for a receive that has not parked yet (`buffered`).
    Accepted {
        instance: Option<String>,
        status: String,
        dedup: bool,
    },
    /// The instance ended while the caller was held (`ack: complete`).
    Ended { instance: String, reply: Reply },
    /// `ack-timeout` passed before the instance ended; it goes on.
    StillRunning { instance: String, status: String },
}

#[derive(Debug, thiserror::Error)]
pub enum IntakeError {
    #[error("no channel `{0}` is deployed")]
    UnknownChannel(String),
    /// The channel is declared on another transport: a message for it arriving by this one
    /// would bypass the broker's delivery, acknowledgement and ordering.
    #[error(
        "channel `{channel}` takes its messages over {}, not {}",
        declared.name(),
        via.name()
    )]
    WrongTransport {
        channel: String,
        declared: Transport,
        via: Transport,
    },
    #[error("{detail}")]
    Invalid {
        detail: String,
        violations: Vec<Violation>,
    },
    #[error("no instance waits on channel `{channel}` for key {key:?}, and no flow starts on it")]
    NoMatch {
        channel: String,
        key: Option<String>,
    },
    /// The tenant has as many live instances as `sutra.tenants.max-live-instances` allows.
    #[error(
        "tenant `{tenant}` has as many live instances as `sutra.tenants.max-live-instances` allows"
    )]
    LiveInstances { tenant: String },
    #[error(transparent)]
    Engine(#[from] Error),
}

/// One reason a message was refused, at a JSON pointer into the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub pointer: String,
    pub message: String,
}

impl From<sutra_store::Error> for IntakeError {
    fn from(error: sutra_store::Error) -> IntakeError {
        IntakeError::Engine(error.into())
    }
}

/// Takes `inbound` as `live` routes it: dedup, relay, start, buffer or refuse. Only the step
/// goes to a lane, the one that owns its instance. The answer is recorded in the history log.
pub(crate) async fn receive(
    shared: &Shared,
    lanes: &Lanes,
    live: &Live,
    inbound: Inbound,
) -> Result<Answer, IntakeError> {
    if !history_log::enabled() {
        return resolve(shared, lanes, live, inbound).await;
    }
    let (tenant, channel, event_id) = (
        inbound.tenant.clone(),
        inbound.channel.clone(),
        inbound.message.id.clone(),
    );
    let answer = resolve(shared, lanes, live, inbound).await;
    if let Ok(answer) = &answer {
        let (instance, status, dedup, outcome) = match answer {
            Answer::Accepted {
                instance,
                status,
                dedup,
            } => (instance.as_deref(), status.as_str(), *dedup, "accepted"),
            Answer::Ended { instance, reply } => {
                let status = match reply {
                    Reply::Completed(_) => "completed",
                    Reply::Failed { .. } => "failed",
                    Reply::Cancelled => "cancelled",
                };
                (Some(instance.as_str()), status, false, "ended")
            }
            Answer::StillRunning { instance, status } => (
                Some(instance.as_str()),
                status.as_str(),
                false,
                "still_running",
            ),
        };
        let answered = history_log::Answered {
            tenant: &tenant,
            channel: &channel,
            event_id: &event_id,
            instance,
            status,
            dedup,
            outcome,
        };
        history_log::answered(&shared.config.replica_id, &answered);
    }
    answer
}

async fn resolve(
    shared: &Shared,
    lanes: &Lanes,
    live: &Live,
    inbound: Inbound,
) -> Result<Answer, IntakeError> {
    let Inbound {
        tenant,
        channel,
        message,
        via,
    } = inbound;
    let route = live
        .route(&tenant, &channel)
        .ok_or_else(|| IntakeError::UnknownChannel(channel.clone()))?;
    let definition = route.channel(&channel);
    if definition.transport != via {
        return Err(IntakeError::WrongTransport {
            channel,
            declared: definition.transport,
            via,
        });
    }
    validate(definition, &message)?;
    let key = correlate(definition, &message)?;
    let hold = definition.ack == Ack::Complete;
    let arrived = Arrived {
        tenant: &tenant,
        channel: &channel,
        message: &message,
        key: key.as_deref(),
        hold,
    };
    // A message that can start a flow tries the start first: the start's own transaction
    // dedups the message and looks for an instance waiting on its key, so the common start
    // costs no transaction before it. Only a message an instance waits for is looked up.
    if let Start::Answered(started) = try_start(shared, lanes, &route, definition, &arrived).await {
        return started;
    }
    let store = &shared.store;
    // The wait found may be resolved before the relay's step runs — another arm of its race
    // won, its timer fired: the message is then looked up once more, as if it had come a
    // moment later (decision 0050). A second stale relay is the sender's to send again.
    for attempt in 0..2 {
        let lookup = store
            .look_up(&tenant, &channel, &message.id, key.as_deref())
            .await?;
        if let Some(answer) = lookup.answer {
            return Ok(dedup(answer));
        }
        let Some(target) = lookup.wait else {
            break;
        };
        match relay(shared, lanes, definition, &arrived, target).await {
            Err(IntakeError::Engine(Error::Stale(_))) if attempt == 0 => continue,
            relayed => return relayed,
        }
    }
    // The instance the start found waiting moved on before the look: start after all. One
    // found waiting again is a race the sender settles by sending again.
    match try_start(shared, lanes, &route, definition, &arrived).await {
        Start::Answered(started) => return started,
        Start::Waited => {
            return Err(IntakeError::Engine(Error::Stale(format!(
                "the instance waiting on channel `{channel}` with this message's key moved on \
                 while the message was correlated"
            ))));
        }
        Start::NoFlow => {}
    }
    match (definition.buffer, key) {
        (Some(buffer), Some(key)) => {
            let expires_at = shared
                .clock
                .now()
                .saturating_add(buffer)
                .unwrap_or(Timestamp::MAX);
            let buffered = BufferedMessage {
                channel: channel.clone(),
                key,
                message,
                expires_at,
            };
            Ok(match store.buffer(&tenant, &buffered).await? {
                Some(first) => dedup(first),
                None => Answer::Accepted {
                    instance: None,
                    status: "buffered".into(),
                    dedup: false,
                },
            })
        }
        (_, key) => Err(IntakeError::NoMatch { channel, key }),
    }
}

/// A message as intake resolved it, for the lane request that consumes it.
struct Arrived<'a> {
    tenant: &'a str,
    channel: &'a str,
    message: &'a Message,
    key: Option<&'a str>,
    hold: bool,
}

/// What an attempt to start an instance with a message came to.
enum Start {
    /// No flow starts on the message's channel.
    NoFlow,
    /// An instance waits on the message's key: the message is a relay, and nothing was written.
    Waited,
    /// The start ran (or was answered as a duplicate): the caller's answer.
    Answered(Result<Answer, IntakeError>),
}

/// Starts an instance with the message, if a flow starts on its channel.
async fn try_start(
    shared: &Shared,
    lanes: &Lanes,
    route: &ChannelRoute,
    channel: &Channel,
    arrived: &Arrived<'_>,
) -> Start {
    let Some(request) = start_request(route, arrived) else {
        return Start::NoFlow;
    };
    if !shared.live.admit(arrived.tenant) {
        return Start::Answered(Err(IntakeError::LiveInstances {
            tenant: arrived.tenant.to_owned(),
        }));
    }
    let id = request.key.id.clone();
    match answer(shared, lanes, channel, request).await {
        // This very start, committed by a group whose COMMIT was answered with a lost
        // connection, then found by its member run alone: the message was consumed by this
        // send, not an earlier one.
        Err(IntakeError::Engine(Error::Store(sutra_store::Error::Duplicate(first))))
            if first.instance.as_deref() == Some(id.as_str()) =>
        {
            Start::Answered(Ok(Answer::Accepted {
                instance: first.instance,
                status: first.status,
                dedup: false,
            }))
        }
        Err(IntakeError::Engine(Error::Store(sutra_store::Error::Duplicate(first)))) => {
            Start::Answered(Ok(dedup(first)))
        }
        Err(IntakeError::Engine(Error::Store(sutra_store::Error::Waited { .. }))) => Start::Waited,
        other => Start::Answered(other),
    }
}

/// Resumes the instance waiting on the message's key with it.
async fn relay(
    shared: &Shared,
    lanes: &Lanes,
    channel: &Channel,
    arrived: &Arrived<'_>,
    target: WaitTarget,
) -> Result<Answer, IntakeError> {
    let event = Event::Relay {
        park: target.park,
        message: arrived.message.clone(),
    };
    let work = Work::Resume {
        event,
        taken: None,
        consumed: Some(Consumed {
            channel: arrived.channel.to_owned(),
            event_id: arrived.message.id.clone(),
            key: None,
        }),
    };
    let request = StepRequest {
        key: InstanceKey {
            tenant: arrived.tenant.to_owned(),
            id: target.instance,
        },
        work,
        hold: arrived.hold,
    };
    answer(shared, lanes, channel, request).await
}

/// Runs the step on the instance's lane, then answers as the channel's `ack` says.
async fn answer(
    shared: &Shared,
    lanes: &Lanes,
    channel: &Channel,
    request: StepRequest,
) -> Result<Answer, IntakeError> {
    let StepOutcome {
        instance,
        status,
        reply,
        hold,
    } = lanes.run(request).await.inspect_err(|error| {
        if matches!(error, Error::Busy) {
            metrics::claim_bounce(BouncePath::Relay);
        }
    })?;
    let (Some(hold), None) = (hold, &reply) else {
        return Ok(match reply {
            Some(reply) if channel.ack == Ack::Complete => Answer::Ended { instance, reply },
            _ => Answer::Accepted {
                instance: Some(instance),
                status: status.as_str().into(),
                dedup: false,
            },
        });
    };
    // Withdrawn however the wait ends, this future dropped included.
    let _withdrawn = hold.withdrawal;
    match shared
        .clock
        .timeout(channel.ack_timeout.unsigned_abs(), hold.reply)
        .await
    {
        Ok(Ok(reply)) => Ok(Answer::Ended { instance, reply }),
        _ => Ok(Answer::StillRunning {
            instance,
            status: status.as_str().into(),
        }),
    }
}

/// The reply of `key`'s ending step once it ends, waiting up to `timeout`; `None` if it runs
/// still. The caller is registered before the instance is read, so an end committed between
/// the two is not missed; an end on another replica is not told here (no step recorded this
/// replica as its holder), so the instance is read again when the wait is over.
pub(crate) async fn await_end(
    shared: &Shared,
    key: &InstanceKey,
    timeout: std::time::Duration,
) -> Result<Option<Reply>, Error> {
    let hold = shared.settle.register(key);
    let withdrawn = hold.withdrawal;
    let told = match ended(shared, key).await {
        Ok(None) => shared
            .clock
            .timeout(timeout, hold.reply)
            .await
            .ok()
            .and_then(Result::ok),
        other => return other,
    };
    drop(withdrawn);
    match told {
        Some(reply) => Ok(Some(reply)),
        None => ended(shared, key).await,
    }
}

/// The reply the instance's ending step gave, if it has ended.
async fn ended(shared: &Shared, key: &InstanceKey) -> Result<Option<Reply>, Error> {
    let record = shared.store.instance(&key.tenant, &key.id).await?;
    Ok(record.and_then(|record| Reply::of_ended(&record.snapshot)))
}

/// A new instance of the active flow that starts on the message's channel, if there is one: a
/// channel only a draining version still declares starts nothing.
fn start_request(route: &ChannelRoute, arrived: &Arrived<'_>) -> Option<StepRequest> {
    if !route.starts {
        return None;
    }
    let flow = route.deployment.flows_starting_on(arrived.channel).next()?;
    let id = uuid::Uuid::now_v7().to_string();
    let info = InstanceInfo {
        id: id.clone(),
        tenant: arrived.tenant.to_owned(),
        deployment: route.deployment.name.clone(),
        version: route.version,
        flow: flow.name.clone(),
        parent: None,
    };
    let work = Work::Start {
        info,
        message: arrived.message.clone(),
        channel: arrived.channel.to_owned(),
        key: arrived.key.map(str::to_owned),
    };
    Some(StepRequest {
        key: InstanceKey {
            tenant: arrived.tenant.to_owned(),
            id,
        },
        work,
        hold: arrived.hold,
    })
}

fn dedup(first: InboxAnswer) -> Answer {
    Answer::Accepted {
        instance: first.instance,
        status: first.status,
        dedup: true,
    }
}

/// Refuses what cannot be stored faithfully (`\u0000` anywhere, which PostgreSQL text cannot
/// hold, and attributes longer than [`KEY_BYTES_MAX`], keys of the store's indexes) and what the
/// channel's schema rejects, listing every violation.
fn validate(channel: &Channel, message: &Message) -> Result<(), IntakeError> {
    let mut violations = Vec::new();
    let attributes = [
        ("id", Some(&message.id)),
        ("type", Some(&message.kind)),
        ("source", Some(&message.source)),
        ("subject", message.subject.as_ref()),
        ("time", message.time.as_ref()),
    ];
    for (name, value) in attributes {
        let Some(value) = value else {
            continue;
        };
        // `time` is kept with the message, never a key: only its NUL matters.
        if name != "time" && value.len() > KEY_BYTES_MAX {
            violations.push(Violation {
                pointer: String::new(),
                message: format!(
                    "the event attribute `{name}` is {} bytes long; at most {KEY_BYTES_MAX} are taken",
                    value.len()
                ),
            });
        }
        if value.contains('\0') {
            violations.push(Violation {
                pointer: String::new(),
                message: format!(
                    "the event attribute `{name}` contains the character \\u0000, which cannot be \
                     stored; remove it"
                ),
            });
        }
    }
    violations.extend(
        nul_pointers(&message.data)
            .into_iter()
            .map(|pointer| Violation {
                pointer,
                message: "contains the character \\u0000, which cannot be stored; remove it".into(),
            }),
    );
    if let Some(schema) = &channel.schema {
        violations.extend(
            schema
                .violations(&message.data)
                .into_iter()
                .map(|(pointer, message)| Violation { pointer, message }),
        );
    }
    if violations.is_empty() {
        return Ok(());
    }
    let detail = format!(
        "the message's data is not valid for channel `{}` ({} problems)",
        channel.name,
        violations.len()
    );
    Err(IntakeError::Invalid { detail, violations })
}

/// The message's correlation key, by the channel's `correlate` over its attributes.
fn correlate(channel: &Channel, message: &Message) -> Result<Option<String>, IntakeError> {
    let Some(expr) = &channel.correlate else {
        return Ok(None);
    };
    let attributes = message.to_json();
    let bindings = MESSAGE_ROOTS
        .iter()
        .fold(Bindings::new(), |bindings, name| {
            bindings.json(name, &attributes[*name])
        });
    let refused = |detail: String, message: String| IntakeError::Invalid {
        detail,
        violations: vec![Violation {
            pointer: String::new(),
            message,
        }],
    };
    let key = expr.eval_key(&bindings).map_err(|error| {
        let detail = format!(
            "cannot compute the correlation key of channel `{}`: {error}",
            channel.name
        );
        refused(detail, error.message)
    })?;
    Ok(Some(key))
}
