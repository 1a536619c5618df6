//! Conformance of the lease rows behind leader election (SPEC §6): a role has one live holder at
//! a time, an expired lease goes to whoever asks next, and the epoch — the fence for work two
//! holders could overlap on — grows exactly when the holder changes. A released lease is free
//! at once, which is what lets a replica that shuts down hand its roles over without anyone
//! waiting out the TTL (the restart hang of the design text).
//!
//! Leases meant to expire last [`LAPSE`] and the tests sleep past them; leases meant to hold last
//! an hour.

use super::fixtures::{HOUR, LAPSE, lapse};
use crate::{Lease, Store};

const ROLE: &str = "timers";
const OTHER_ROLE: &str = "instance-sweeper";
const REPLICA_A: &str = "replica-a";
const REPLICA_B: &str = "replica-b";

async fn acquire<S: Store>(
    store: &S,
    role: &str,
    holder: &str,
    ttl: jiff::SignedDuration,
) -> Option<Lease> {
    store.acquire_lease(role, holder, ttl).await.unwrap()
}

/// Acquires a lease that must be granted.
async fn granted<S: Store>(store: &S, holder: &str, ttl: jiff::SignedDuration) -> Lease {
    acquire(store, ROLE, holder, ttl)
        .await
        .unwrap_or_else(|| panic!("{holder} is granted {ROLE}"))
}

pub async fn one_holder_at_a_time<S: Store>(store: &S) {
    let first = granted(store, REPLICA_A, HOUR).await;
    assert_eq!(
        (first.role.as_str(), first.holder.as_str()),
        (ROLE, REPLICA_A)
    );

    assert_eq!(acquire(store, ROLE, REPLICA_B, HOUR).await, None);
    let contend = |holder| acquire(store, OTHER_ROLE, holder, HOUR);
    let (c1, c2, c3, c4) = tokio::join!(
        contend("c-1"),
        contend("c-2"),
        contend("c-3"),
        contend("c-4")
    );
    let won: Vec<Lease> = [c1, c2, c3, c4].into_iter().flatten().collect();
    assert_eq!(
        won.len(),
        1,
        "exactly one of concurrent contenders wins: {won:?}"
    );

    let listed = store.leases().await.unwrap();
    let holders: Vec<(&str, &str)> = listed
        .iter()
        .map(|lease| (lease.role.as_str(), lease.holder.as_str()))
        .collect();
    assert_eq!(
        holders,
        [(OTHER_ROLE, won[0].holder.as_str()), (ROLE, REPLICA_A)],
        "one row per role, by role"
    );
    assert_eq!(listed[1], first);
}

pub async fn an_expired_lease_is_taken_and_its_epoch_grows<S: Store>(store: &S) {
    let lapsed = granted(store, REPLICA_A, LAPSE).await;
    lapse().await;

    let taken = granted(store, REPLICA_B, HOUR).await;

    assert_eq!(taken.holder, REPLICA_B);
    assert_eq!(taken.epoch, lapsed.epoch + 1);
    assert!(taken.expires_at > lapsed.expires_at);
    assert_eq!(
        acquire(store, ROLE, REPLICA_A, HOUR).await,
        None,
        "the previous holder cannot renew what it lost"
    );
}

pub async fn the_holder_renews_without_changing_the_epoch<S: Store>(store: &S) {
    let first = granted(store, REPLICA_A, HOUR).await;
    lapse().await;

    let renewed = granted(store, REPLICA_A, HOUR).await;

    assert_eq!(renewed.epoch, first.epoch);
    assert!(
        renewed.expires_at > first.expires_at,
        "a renewal moves the expiry: {renewed:?} after {first:?}"
    );
    assert_eq!(store.leases().await.unwrap(), [renewed]);
}

pub async fn a_released_lease_is_free_at_once<S: Store>(store: &S) {
    let held = granted(store, REPLICA_A, HOUR).await;
    store.release_lease(ROLE, REPLICA_B).await.unwrap();
    assert_eq!(
        acquire(store, ROLE, REPLICA_B, HOUR).await,
        None,
        "only the holder releases"
    );

    store.release_lease(ROLE, REPLICA_A).await.unwrap();

    let taken = granted(store, REPLICA_B, HOUR).await;
    assert_eq!(
        taken.epoch,
        held.epoch + 1,
        "the row and its epoch outlive a release"
    );
}
