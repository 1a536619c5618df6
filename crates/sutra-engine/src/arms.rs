//! The durable rows behind a park (SPEC §5.6: what was asked): a correlation wait, a timer, a
//! task, as the store arms them. A call's park has only its deadline's timer: the child it
//! waits for is inserted with the step's children.

use sutra_core::snapshot::{Park, ParkKind, Role, Snapshot, TokenId};
use sutra_store::Arm;

/// The rows of the park `token` holds in the `snapshot` a step left. A park with a due time (a
/// `wait`, a `receive`'s timeout, a deadline) has a timer beside its wait or task, and
/// whichever answers first consumes both. A receive park that is a race's arm names its race,
/// so that the store lets one arm of a race take a buffered message ([`Arm::Wait`]'s `group`);
/// only a receive's token is looked up for it, so a fan-out's task parks cost no search.
pub fn of(park: &Park, token: TokenId, snapshot: &Snapshot) -> Vec<Arm> {
    let timer = park.kind.due().map(|due| Arm::Timer { park: park.id, due });
    let waiting = match &park.kind {
        ParkKind::Receive { channel, key, .. } => Some(Arm::Wait {
            park: park.id,
            channel: channel.clone(),
            key: key.clone(),
            group: race_of(snapshot, token).map(|racer| racer.0),
        }),
        // A call's child row is the store's `children` of the step, not a row of the park.
        ParkKind::Wait { .. } | ParkKind::Call { .. } => None,
        ParkKind::Task {
            topic,
            input,
            retries,
            backoff,
            lock,
            ..
        } => Some(Arm::Task {
            park: park.id,
            topic: topic.clone(),
            input: input.clone(),
            retries: *retries,
            backoff: *backoff,
            lock: *lock,
            taken_by: None,
        }),
    };
    waiting.into_iter().chain(timer).collect()
}

/// The racing token whose arm `token` is, in the snapshot a step left; `None` for any other
/// token.
fn race_of(snapshot: &Snapshot, token: TokenId) -> Option<TokenId> {
    let token = snapshot.token(token)?;
    match token.role {
        Some(Role::Arm { .. }) => token.parent,
        _ => None,
    }
}
