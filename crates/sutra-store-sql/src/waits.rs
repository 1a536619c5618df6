//! A step's correlation waits (SPEC §7.2): the order of a park with a `buffer` of an early
//! message on the same key, the look at who holds the key, and what arming a wait finds
//! (decisions 0015, 0068). The wait's own insert is [`StepStatements::insert_wait`], written by
//! the step's commit (`commit`).

use serde_json::Value;
use sutra_core::snapshot::{InstanceInfo, ParkId};
use sutra_store::{Arm, Error, Result, StepCommit, WaitTarget};

use crate::commit::StepStatements;
use crate::statements::{Correlation, LockOn, Statements};

/// Orders this commit with any `buffer` of a message on a key one of its waits parks on, and
/// refuses the step, before it writes anything, when a wait it arms is on a correlation key
/// another park holds (SPEC §7.2) — any park but one this step disarms. So a refusal leaves the
/// caller's transaction as it was but for the locks, and a group's other members stand.
///
/// Without the order, under READ COMMITTED each could miss the other's uncommitted row — the
/// park its buffered message, `buffer` the park's wait — and the message would sit unmatched.
/// The locks are taken before the wait is inserted and the buffer read (a later statement,
/// [`StepStatements::insert_wait`]), so whichever transaction comes second reads after the first
/// committed. The holders are read in the same statement as the locks are taken
/// ([`StepStatements::lock_and_find_waits`]): a key taken by a park that committed while this
/// step waited for a lock is found by the insert instead, after the step's first writes — an
/// error of the whole transaction, and a retry finds the key taken here.
pub(crate) async fn lock_waits_refusing_taken_aliases<T: StepStatements>(
    tx: &mut T,
    step: &StepCommit,
) -> Result<()> {
    let instance = &step.snapshot.instance;
    let correlations: Vec<Correlation> = step
        .arms
        .iter()
        .filter_map(|arm| match arm {
            Arm::Wait { channel, key, .. } => Some(Correlation {
                tenant: &instance.tenant,
                channel,
                key,
            }),
            _ => None,
        })
        .collect();
    if correlations.is_empty() {
        return Ok(());
    }
    let holders = tx.lock_and_find_waits(&correlations).await?;
    for (on, holder) in correlations.iter().zip(holders) {
        let Some(holder) = holder else {
            continue;
        };
        let disarmed = holder.instance == instance.id
            && step.disarms.iter().any(|disarm| disarm.park == holder.park);
        if !disarmed {
            return Err(Error::AliasTaken {
                channel: on.channel.to_owned(),
                key: on.key.to_owned(),
            });
        }
    }
    Ok(())
}

/// What [`StepStatements::insert_wait`] did.
#[derive(Debug)]
pub enum ArmedWait {
    /// Nothing: another park holds the key.
    KeyTaken,
    /// The alias, and the buffered message it took, if asked and one was there.
    Armed { early: Option<Value> },
}

/// [`StepStatements::lock_and_find_waits`] one statement at a time.
pub(crate) async fn lock_then_find_each<T: Statements>(
    tx: &mut T,
    on: &[Correlation<'_>],
) -> Result<Vec<Option<WaitTarget>>> {
    let locks: Vec<LockOn> = on.iter().map(|on| LockOn::Correlation(*on)).collect();
    tx.serialize(&locks).await?;
    let mut holders = Vec::with_capacity(on.len());
    for correlation in on {
        holders.push(tx.find_wait(*correlation).await?);
    }
    Ok(holders)
}

/// The fields of an [`sutra_store::Arm::Wait`]: the park's correlation alias.
pub struct WaitArm<'a> {
    pub instance: &'a InstanceInfo,
    pub park: ParkId,
    pub on: Correlation<'a>,
}
