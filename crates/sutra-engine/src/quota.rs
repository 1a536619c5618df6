//! Live instances per tenant, bounded (`sutra.tenants.max-live-instances`, issue 48): a flow
//! calling itself eight times a level made 48,000 instances in 16 s, and nothing bounded a
//! tenant's instances but its depth and breadth multiplied.
//!
//! Counting a tenant's live instances at every start would put a statement on the hot path, and
//! a counter row would be a hot row every start of the tenant writes. So the count is the
//! sampler's: every tenant's live instances (`created`, `suspended`) counted by the database
//! once a sample interval (the pulse's sampler, every 10 s), plus the instances this replica
//! started since. A start past the quota is refused (`SUTRA.TENANT.LIVE_INSTANCES.EXCEEDED`, 429,
//! retryable); a `call` past it goes to its `on-error`. What the count cannot see — other
//! replicas' starts since the last count — lets a tenant overshoot by at most their start rate
//! times the interval: the quota bounds a runaway, it is not an exact ledger (decision 0079).

use std::collections::HashMap;
use std::sync::Mutex;

/// The tally of every tenant this replica has counted or started.
pub(crate) struct LiveInstances {
    max: u64,
    tallies: Mutex<HashMap<String, Tally>>,
}

#[derive(Default)]
struct Tally {
    /// Live as the database last counted them.
    counted: u64,
    /// Started by this replica since.
    started: u64,
}

impl LiveInstances {
    pub(crate) fn new(max: u64) -> LiveInstances {
        LiveInstances {
            max,
            tallies: Mutex::default(),
        }
    }

    /// How many more instances `tenant` may start.
    pub(crate) fn room(&self, tenant: &str) -> u64 {
        let tallies = self.tallies();
        let live = tallies
            .get(tenant)
            .map_or(0, |tally| tally.counted.saturating_add(tally.started));
        self.max.saturating_sub(live)
    }

    /// `n` instances of `tenant` were started here.
    pub(crate) fn started(&self, tenant: &str, n: u64) {
        if n == 0 {
            return;
        }
        let mut tallies = self.tallies();
        let tally = tallies.entry(tenant.to_owned()).or_default();
        tally.started = tally.started.saturating_add(n);
    }

    /// The database's count replaces what was counted and started before it: a tenant it does
    /// not name has none live.
    pub(crate) fn recount(&self, counted: Vec<(String, u64)>) {
        let counted = counted.into_iter().map(|(tenant, counted)| {
            (
                tenant,
                Tally {
                    counted,
                    started: 0,
                },
            )
        });
        *self.tallies() = counted.collect();
    }

    fn tallies(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tally>> {
        // A panic elsewhere while holding the lock leaves plain numbers behind: still usable.
        self.tallies.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenants_room_is_the_quota_less_its_count_and_its_starts_since() {
        let live = LiveInstances::new(10);
        assert_eq!(live.room("a"), 10);
        live.started("a", 3);
        assert_eq!((live.room("a"), live.room("b")), (7, 10));
        live.recount(vec![("a".into(), 9), ("b".into(), 12)]);
        assert_eq!(
            (live.room("a"), live.room("b")),
            (1, 0),
            "starts counted anew"
        );
        live.started("a", 5);
        assert_eq!(live.room("a"), 0);
        live.recount(vec![]);
        assert_eq!(live.room("a"), 10, "none live");
    }
}
