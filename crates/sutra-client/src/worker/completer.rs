//! The worker's completions, sent in batches (`POST /v1/tasks/complete`).
//!
//! A finished handler's completion joins a queue. One loop takes everything queued (up to the
//! server's cap) and sends it as one call, then takes what queued up while that call was out:
//! natural batching. An idle worker's completion leaves at once, alone, so batching adds no
//! latency; a busy worker's completions wait only for the call in flight, and the server gets
//! them together, which lets its lanes commit them together (decision 0025).
//!
//! Each completion is answered with its own item's result, which is what a single completion
//! would have answered, so the execution that queued it handles a lost lock as it always has.
//!
//! A completion may ask for the worker's next task ([`Take`]): when the step it resumes arms a
//! task of the worker's topics, the server locks it for this worker in the same transaction and
//! answers it with the item, and the execution runs it in the slot its completion freed — no
//! poll between one task of an instance and the next (decision 0038).

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::client::Client;
use crate::error::ApiError;
use crate::types::{COMPLETE_BATCH_MAX, CompleteItem, ItemResult, LockedTask, Take};

/// How one completion ended: completed, with the worker's next task when one was locked for it,
/// or why it did not. A call that failed as a whole failed every item it carried, so its error
/// is shared between them.
pub(crate) type Completed = Result<Option<LockedTask>, Arc<ApiError>>;

/// Queues completions for the sending loop. Cheap to clone; the loop ends when the last clone
/// is dropped.
#[derive(Clone)]
pub(crate) struct Completer {
    // Unbounded, yet never holds more than the worker's concurrency: each execution queues one
    // completion and waits for its answer before it queues another.
    queue: mpsc::UnboundedSender<Queued>,
    /// What a completion asking for the next task asks for: this worker, its topics, its lock.
    take: Arc<Take>,
}

struct Queued {
    item: CompleteItem,
    answer: oneshot::Sender<Completed>,
}

impl Completer {
    /// A completer sending through `client`, and its sending loop, which ends once every clone
    /// of the completer is dropped and all they queued has been answered.
    pub(crate) fn start(client: Client, take: Take) -> (Completer, JoinHandle<()>) {
        let (queue, queued) = mpsc::unbounded_channel();
        let sending = tokio::spawn(send_batches(client, queued));
        let take = Arc::new(take);
        (Completer { queue, take }, sending)
    }

    /// Completes the task with `output` in the next batch, and answers that item's result; with
    /// `take_next`, asks for the worker's next task with it.
    pub(crate) async fn complete(
        &self,
        id: &str,
        lock_token: &str,
        output: &Value,
        take_next: bool,
    ) -> Completed {
        let (answer, answered) = oneshot::channel();
        let item = CompleteItem {
            id: id.to_owned(),
            lock_token: lock_token.to_owned(),
            output: output.clone(),
            take: take_next.then(|| Take::clone(&self.take)),
        };
        self.queue
            .send(Queued { item, answer })
            .expect("the loop runs while a completer lives");
        answered
            .await
            .expect("the loop answers every completion it takes")
    }
}

/// Waits for a completion, takes it with whatever else is queued by then, sends them as one
/// batch, and again, until no completer is left.
async fn send_batches(client: Client, mut queued: mpsc::UnboundedReceiver<Queued>) {
    let mut batch = Vec::with_capacity(COMPLETE_BATCH_MAX);
    while queued.recv_many(&mut batch, COMPLETE_BATCH_MAX).await > 0 {
        send(&client, std::mem::take(&mut batch)).await;
    }
}

async fn send(client: &Client, batch: Vec<Queued>) {
    let (items, answers): (Vec<_>, Vec<_>) = batch
        .into_iter()
        .map(|queued| (queued.item, queued.answer))
        .unzip();
    // A send fails only when its execution is gone, which then needs no answer.
    match client.complete_tasks(&items).await {
        Ok(results) => {
            for (answer, result) in answers.into_iter().zip(results) {
                let _ = answer.send(outcome(result));
            }
        }
        Err(error) => {
            let error = Arc::new(error);
            for answer in answers {
                let _ = answer.send(Err(Arc::clone(&error)));
            }
        }
    }
}

/// One item's result as a single completion would have answered it.
fn outcome(result: ItemResult) -> Completed {
    match result.error {
        Some(problem) => Err(Arc::new(ApiError::Problem(Box::new(problem)))),
        None => Ok(result.taken),
    }
}
