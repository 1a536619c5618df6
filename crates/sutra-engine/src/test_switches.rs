//! Test-only switches, read once from the environment. They break an invariant on purpose so
//! that the lane tests (crates/sutra-cli/tests/lanes.rs) can prove the invariant is load-bearing;
//! no deployment sets them, and unset they cost one atomic load.
//!
//! - `SUTRA_TEST_MISROUTE=1`: every other request strays: a lane takes it whoever holds its
//!   instance, so that two lanes work on one instance at once. Correctness must not rest on
//!   routing: the stray request bounces on the claim (`CLAIM_HELD`) like a competing replica's.
//! - `SUTRA_TEST_PER_PROCESS_OWNER=1`: every lane claims as `{replica}/lane-0`, the per-process
//!   owner id the design rejects. The claim re-enters for its own owner; with a claim that
//!   outlived its step's transaction, two lanes could then resume one instance at once. Since
//!   the claim is taken inside the step's transaction (decision 0024), the row lock keeps them
//!   apart anyway, and the lanes test shows it under this switch.
//!
//! They exist only with the `test-hooks` feature, which only test builds enable: without it
//! each switch is the identity, and the variables' names are not in the binary, so no release
//! build can be talked out of the lane-scoped owner.

#[cfg(feature = "test-hooks")]
pub(crate) use switched::{ack_before_commit, owner_lane, stray};

/// Whether a group answers its members before it commits: never.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn ack_before_commit() -> bool {
    false
}

/// Whether a request is taken whoever holds its instance: never.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn stray() -> bool {
    false
}

/// The lane index that lane `lane` claims as: its own.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn owner_lane(lane: usize) -> usize {
    lane
}

#[cfg(feature = "test-hooks")]
mod switched {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn enabled(variable: &str) -> bool {
        std::env::var(variable).is_ok_and(|value| value == "1")
    }

    /// Whether a request is taken whoever holds its instance: under `SUTRA_TEST_MISROUTE`
    /// every other one.
    pub(crate) fn stray() -> bool {
        static MISROUTE: OnceLock<bool> = OnceLock::new();
        static REQUESTS: AtomicU64 = AtomicU64::new(0);
        if !*MISROUTE.get_or_init(|| enabled("SUTRA_TEST_MISROUTE")) {
            return false;
        }
        REQUESTS.fetch_add(1, Ordering::Relaxed) % 2 == 1
    }

    /// The lane index that lane `lane` claims as: its own, or 0 under
    /// `SUTRA_TEST_PER_PROCESS_OWNER`.
    pub(crate) fn owner_lane(lane: usize) -> usize {
        static PER_PROCESS: OnceLock<bool> = OnceLock::new();
        if *PER_PROCESS.get_or_init(|| enabled("SUTRA_TEST_PER_PROCESS_OWNER")) {
            0
        } else {
            lane
        }
    }

    /// Whether a group answers its members before it commits: under
    /// `SUTRA_TEST_ACK_BEFORE_COMMIT`.
    pub(crate) fn ack_before_commit() -> bool {
        static EARLY: OnceLock<bool> = OnceLock::new();
        *EARLY.get_or_init(|| enabled("SUTRA_TEST_ACK_BEFORE_COMMIT"))
    }
}
