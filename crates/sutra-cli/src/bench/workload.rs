//! The standard workloads of SPEC §9: their flow documents, how one instance is driven through
//! one, and the built-in worker `two-tasks` and `fan-out` need.
//!
//! Every step is timed from the client's side, because the engine exposes no per-step timing:
//! a step's latency runs from the client action that makes it due (the start message, a task's
//! result, the relay message) to the moment the client sees its effect (the next task handed to
//! the worker, the send answered). So it includes HTTP, the store's commit and, for tasks, the
//! worker's poll — what a user of the engine waits for.

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::json;
use sutra_client::{Client, CloudEvent, Sent, Task, TaskError, Worker};
use sutra_core::codes;

use super::amqp::{self, Broker};
use super::latency::Recorder;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Workload {
    /// One step: start → end.
    StartEnd,
    /// Three steps: start → task → task → end, with the bench's own worker.
    TwoTasks,
    /// Two steps: start → receive (the bench sends the message) → end.
    Relay,
    /// One step, by RabbitMQ: start from an AMQP queue (`ack: commit`) → emit the reply to
    /// another → end; the client's round trip ends when the reply reaches it.
    AmqpStart,
    /// N + 1 steps (`--items N`): start → a `for-each` over the N items the start message
    /// carries, one task per item on `bench-item`, all at once → end. Each body's completion is
    /// a step; the start step that fans out, with its N task rows, is one.
    FanOut,
    /// Three steps: start → `call` of a flow that only ends → end: the caller's start (which
    /// inserts the child), the child's start (which ends it and reports), the caller's resume.
    Call,
}

/// `--items` when not given: the items of a `fan-out` start message.
pub const ITEMS_DEFAULT: u64 = 10;

/// The held send of `ack: complete` outlives the slowest instance a run can see.
const ACK_TIMEOUT: &str = "PT5M";
/// `fan-out`'s held send: under the client's 30 s request timeout, which a fan-out of
/// thousands of items can outlast; past it the bench asks for the instance until it has ended.
const FAN_OUT_ACK_TIMEOUT: &str = "PT20S";
/// How often the bench asks for a `fan-out` instance whose held send answered before its end.
const FAN_OUT_POLL: Duration = Duration::from_millis(250);
/// How long a sender waits before retrying a refusal the server marks retryable (a busy claim).
const RETRY_PAUSE: Duration = Duration::from_millis(5);

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::StartEnd => "start-end",
            Workload::TwoTasks => "two-tasks",
            Workload::Relay => "relay",
            Workload::AmqpStart => "amqp-start",
            Workload::FanOut => "fan-out",
            Workload::Call => "call",
        }
    }

    /// Whether the workload's clients talk through RabbitMQ.
    pub fn uses_amqp(self) -> bool {
        self == Workload::AmqpStart
    }

    /// The steps one instance takes: each commit of the instance's progress the engine makes;
    /// `items` counts for `fan-out` only (its start, then one step per body's completion).
    pub fn steps(self, items: u64) -> u64 {
        match self {
            Workload::StartEnd | Workload::AmqpStart => 1,
            Workload::TwoTasks | Workload::Call => 3,
            Workload::Relay => 2,
            Workload::FanOut => items + 1,
        }
    }

    /// The deployment document. Start channels are `ack: complete`, so a start's send returns
    /// when its instance has ended and no polling is needed to see it end — except `relay`'s,
    /// which returns once the instance parks, so the relay message has somewhere to go.
    pub fn document(self) -> String {
        let name = self.name();
        let flow = match self {
            Workload::StartEnd => "      - id: done\n        end: {}\n".to_owned(),
            Workload::TwoTasks => "      - id: first\n        task: { topic: bench-first, input: { n: \"= vars.input.n\" } }\n\
                                   \x20     - id: second\n        task: { topic: bench-second, input: { n: \"= vars.input.n\" } }\n\
                                   \x20     - id: done\n        end: {}\n"
                .to_owned(),
            Workload::AmqpStart => return amqp_document(),
            Workload::Relay => "      - id: wait\n        receive: { channel: bench-relay-message, key: vars.input.n }\n\
                                \x20     - id: done\n        end: {}\n"
                .to_owned(),
            Workload::FanOut => "      - id: each\n        for-each:\n          items: \"= vars.input.items\"\n\
                                 \x20         task: { topic: bench-item, input: { n: \"= vars.input.n\", i: \"= index\" } }\n\
                                 \x20       output: results\n\
                                 \x20     - id: done\n        end: {}\n"
                .to_owned(),
            Workload::Call => "      - id: call\n        call: { flow: bench-call-child }\n\
                               \x20     - id: done\n        end: {}\n\
                               \x20 bench-call-child:\n    nodes:\n\
                               \x20     - id: done\n        end: {}\n"
                .to_owned(),
        };
        let (start_ack, more_channels) = if self == Workload::Relay {
            ("commit", channel("bench-relay-message", "complete"))
        } else {
            ("complete", String::new())
        };
        let start = channel(&format!("bench-{name}"), start_ack);
        let start = match self {
            Workload::FanOut => start.replace(ACK_TIMEOUT, FAN_OUT_ACK_TIMEOUT),
            _ => start,
        };
        format!(
            "name: bench-{name}\ntenant: default\nchannels:\n{start}{more_channels}\
             flows:\n  bench-{name}:\n    start: {{ channel: bench-{name} }}\n    nodes:\n{flow}"
        )
    }

    /// Drives instance `key` from its start to its end, recording each step's latency; over
    /// `broker` for a workload that [uses AMQP](Workload::uses_amqp). A `fan-out` start message
    /// carries `items` numbers.
    pub async fn drive(
        self,
        client: &Client,
        broker: Option<&Broker>,
        key: &str,
        items: u64,
        recorder: &Recorder,
    ) -> Result<(), String> {
        let channel = format!("bench-{}", self.name());
        if self == Workload::FanOut {
            recorder.mark(&fan_out_start(key));
            let items: Vec<u64> = (0..items).collect();
            let sent = send(
                client,
                &channel,
                key,
                "start",
                json!({"n": key, "items": items}),
            );
            until_ended(client, sent.await?, key).await?;
            recorder.step_seen(key);
            recorder.forget(&fan_out_start(key));
            recorder.forget(key);
            return Ok(());
        }
        recorder.mark(key);
        if let (Workload::AmqpStart, Some(broker)) = (self, broker) {
            broker.round_trip(key).await?;
            recorder.step_seen(key);
            return Ok(());
        }
        let sent = send(client, &channel, key, "start", json!({"n": key})).await?;
        match self {
            Workload::StartEnd
            | Workload::TwoTasks
            | Workload::AmqpStart
            | Workload::FanOut
            | Workload::Call => {
                ended(&sent, key)?;
                recorder.step_seen(key);
            }
            Workload::Relay => {
                recorder.step_seen(key);
                recorder.mark(key);
                let message = json!({"n": key});
                let replied = send(client, "bench-relay-message", key, "message", message).await?;
                ended(&replied, key)?;
                recorder.step_seen(key);
            }
        }
        recorder.forget(key);
        Ok(())
    }

    /// Whether the server behind `client` routes this workload's start channel, i.e. has
    /// loaded its deployment — which a deployment made through another replica is only once
    /// that replica converges (`GET /v1/deployments` reads the database, so it lists a version
    /// before every replica has loaded it). Asked by sending a message without the key the
    /// channel correlates on: a channel not loaded is unknown, a loaded one refuses the
    /// message as invalid, before any instance, inbox row or transaction is made.
    pub async fn is_routed(self, client: &Client) -> Result<bool, String> {
        let probe = CloudEvent::new("sutra-bench-probe", "sutra.bench", "sutra-bench", json!({}));
        let channel = format!("bench-{}", self.name());
        match client.send(&channel, &probe).await {
            Err(error) if error.code() == Some(codes::INTAKE_CHANNEL_UNKNOWN.code) => Ok(false),
            Err(error) if error.code() == Some(codes::INTAKE_VALIDATION.code) => Ok(true),
            // A broker channel is refused over HTTP before anything else is looked at.
            Err(error) if error.code() == Some(codes::INTAKE_CHANNEL_TRANSPORT.code) => Ok(true),
            Err(error) => Err(format!(
                "asking {} for {channel}: {error}",
                client.base_url()
            )),
            Ok(sent) => Err(format!(
                "{} took the probe of {channel}, which has no key: {sent:?}",
                client.base_url()
            )),
        }
    }

    /// The worker `two-tasks` and `fan-out` need, running up to `concurrency` handlers at once;
    /// `None` for the workloads without tasks. It is the worker library users have, so its
    /// completions are batched as theirs are, and the bench measures that traffic.
    pub fn worker(self, client: Client, recorder: Recorder, concurrency: u32) -> Option<Worker> {
        if self == Workload::FanOut {
            return Some(
                Worker::new(client, "sutra-bench")
                    .handler("bench-item", move |task: Task<Item>| {
                        let recorder = recorder.clone();
                        async move { Ok::<_, TaskError>(handle_item(&recorder, task.input)) }
                    })
                    .concurrency(concurrency)
                    .poll_wait(Duration::from_secs(1)),
            );
        }
        if self != Workload::TwoTasks {
            return None;
        }
        let first = recorder.clone();
        let second = recorder;
        Some(
            Worker::new(client, "sutra-bench")
                .handler("bench-first", move |task: Task<Key>| {
                    let recorder = first.clone();
                    async move { Ok::<_, TaskError>(handle(&recorder, &task.input.n)) }
                })
                .handler("bench-second", move |task: Task<Key>| {
                    let recorder = second.clone();
                    async move { Ok::<_, TaskError>(handle(&recorder, &task.input.n)) }
                })
                .concurrency(concurrency)
                .poll_wait(Duration::from_secs(1)),
        )
    }
}

/// `amqp-start`: the start's queue, the reply's queue, and a flow that emits the reply.
fn amqp_document() -> String {
    let (requests, replies) = amqp::queues();
    format!(
        "name: bench-amqp-start\ntenant: default\nchannels:\n\
         \x20 bench-amqp-start:\n    transport: amqp\n    queue: {requests}\n    correlate: data.n\n\
         \x20 bench-amqp-reply:\n    transport: amqp\n    queue: {replies}\n\
         flows:\n  bench-amqp-start:\n    start: {{ channel: bench-amqp-start }}\n    nodes:\n\
         \x20     - id: reply\n        emit: {{ channel: bench-amqp-reply, data: {{ n: \"= vars.input.n\" }} }}\n\
         \x20     - id: done\n        end: {{}}\n"
    )
}

/// An http channel's declaration, correlating on the instance's key.
fn channel(name: &str, ack: &str) -> String {
    format!(
        "  {name}:\n    transport: http\n    correlate: data.n\n    ack: {ack}\n    ack-timeout: {ACK_TIMEOUT}\n"
    )
}

/// A task's input and output: the instance's key, which the recorder's marks are filed under.
#[derive(Serialize, Deserialize)]
pub struct Key {
    n: String,
}

/// The step that handed this task over is done; the step its result makes due starts now.
fn handle(recorder: &Recorder, key: &str) -> Key {
    recorder.step_seen(key);
    recorder.mark(key);
    Key { n: key.to_owned() }
}

/// A `fan-out` body's input: the instance's key and the body's index; its output, the index.
#[derive(Deserialize)]
pub struct Item {
    n: String,
    i: u64,
}

#[derive(Serialize)]
pub struct Done {
    i: u64,
}

/// What a `fan-out` instance's start step is filed under, apart from its last completion's.
fn fan_out_start(key: &str) -> String {
    format!("{key}#start")
}

/// A `fan-out` instance has two steps the client sees: its start, seen done when its first body
/// is handed over (the start step created them all), and its last completion, from the last
/// body's result to the instance's end seen. The completions before it have no effect a client
/// can see, so they give no sample.
fn handle_item(recorder: &Recorder, item: Item) -> Done {
    recorder.step_seen(&fan_out_start(&item.n));
    recorder.mark(&item.n);
    Done { i: item.i }
}

/// Sends `data` on `channel`, retrying what the server says is worth retrying (a claim held by
/// a step still running).
async fn send(
    client: &Client,
    channel: &str,
    key: &str,
    what: &str,
    data: serde_json::Value,
) -> Result<Sent, String> {
    let started = Instant::now();
    loop {
        let event = CloudEvent::new(
            format!("{key}-{what}"),
            "sutra.bench",
            "sutra-bench",
            data.clone(),
        );
        match client.send(channel, &event).await {
            Ok(sent) => return Ok(sent),
            Err(error) if error.is_retryable() && started.elapsed() < Duration::from_secs(30) => {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            Err(error) => return Err(format!("{what} of instance {key}: {error}")),
        }
    }
}

/// Waits for a `fan-out` instance's end: its held send's answer, or, when that came first
/// (`FAN_OUT_ACK_TIMEOUT`), the instance's status asked for every `FAN_OUT_POLL`. Each ask is a
/// read transaction, counted in the commits like the engine's own.
async fn until_ended(client: &Client, sent: Sent, key: &str) -> Result<(), String> {
    let id = match &sent {
        Sent::Accepted(accepted) if waiting(&accepted.status) => accepted.instance.clone(),
        _ => None,
    };
    let Some(id) = id else {
        return ended(&sent, key);
    };
    let started = Instant::now();
    loop {
        tokio::time::sleep(FAN_OUT_POLL).await;
        let instance = client
            .instance(&id)
            .await
            .map_err(|e| format!("asking for instance {key} ({id}): {e}"))?;
        match instance.status.as_str() {
            "completed" => return Ok(()),
            status if waiting(status) && started.elapsed() < Duration::from_secs(300) => {}
            status => return Err(format!("instance {key} ({id}) is {status}, not ended")),
        }
    }
}

/// An instance's status while it has not ended: `suspended` when it waits (here, on its bodies'
/// tasks), `running` while a step runs.
fn waiting(status: &str) -> bool {
    matches!(status, "suspended" | "running")
}

/// An `ack: complete` send answered before the instance ended means `ack-timeout` passed.
fn ended(sent: &Sent, key: &str) -> Result<(), String> {
    match sent {
        Sent::Replied { .. } => Ok(()),
        Sent::Accepted(accepted) if accepted.status == "completed" => Ok(()),
        Sent::Accepted(accepted) => Err(format!(
            "instance {key} ({}) did not end within {ACK_TIMEOUT}: {}",
            accepted.instance.as_deref().unwrap_or("none"),
            accepted.status
        )),
    }
}
