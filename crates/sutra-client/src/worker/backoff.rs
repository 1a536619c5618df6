//! Exponential backoff with jitter, for polls that fail while the server is away.
//!
//! Jitter keeps a fleet of workers that lost the same server from coming back in lockstep. The
//! randomness comes from the standard library's per-process hash seed: enough to spread
//! retries, without a random-number crate for one number.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

pub(crate) struct Backoff {
    next: Duration,
    first: Duration,
    max: Duration,
}

impl Backoff {
    pub(crate) fn new(first: Duration, max: Duration) -> Backoff {
        assert!(first <= max, "the first delay must not exceed the maximum");
        Backoff {
            next: first,
            first,
            max,
        }
    }

    /// The delay before the next attempt: between half and all of the current step, which
    /// doubles up to the maximum.
    pub(crate) fn delay(&mut self) -> Duration {
        let step = self.next;
        self.next = (step * 2).min(self.max);
        step / 2 + step.mul_f64(random_fraction() / 2.0)
    }

    /// After a success, the next failure starts from the first step again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A number in [0, 1).
fn random_fraction() -> f64 {
    let bits = RandomState::new().build_hasher().finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_up_to_the_maximum_and_reset_after_a_success() {
        let first = Duration::from_millis(100);
        let max = Duration::from_millis(800);
        let mut backoff = Backoff::new(first, max);
        let steps = [100, 200, 400, 800, 800];
        for step in steps {
            let delay = backoff.delay();
            let step = Duration::from_millis(step);
            assert!(delay >= step / 2 && delay <= step, "{delay:?} for {step:?}");
        }
        backoff.reset();
        assert!(backoff.delay() <= first);
    }
}
