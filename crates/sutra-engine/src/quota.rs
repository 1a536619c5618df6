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

/// Each tenant's starts by this replica when a count began.
pub(crate) struct Mark(HashMap<String, u64>);

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

    /// Whether `tenant` may start one more instance; if so, it is counted as started here. One
    /// look under the lock, so that two starts of one tenant cannot both take its last room.
    pub(crate) fn admit(&self, tenant: &str) -> bool {
        let mut tallies = self.tallies();
        let tally = tallies.entry(tenant.to_owned()).or_default();
        let live = tally.counted.saturating_add(tally.started);
        let admitted = live < self.max;
        if admitted {
            tally.started += 1;
        }
        admitted
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

    /// What this replica had started when a count began: [`LiveInstances::recount`] forgets
    /// only those, since a start made while the count ran may have committed after the count
    /// read its tenant's rows.
    pub(crate) fn mark(&self) -> Mark {
        let tallies = self.tallies();
        Mark(
            (tallies.iter())
                .map(|(tenant, tally)| (tenant.clone(), tally.started))
                .collect(),
        )
    }

    /// The database's count, begun at `mark`, replaces what was counted and started before it:
    /// a tenant it does not name has none live but for what this replica started since. A start
    /// the count did see is then counted twice until the next count: the quota errs towards
    /// refusing, never towards a runaway.
    pub(crate) fn recount(&self, counted: Vec<(String, u64)>, mark: &Mark) {
        let mut tallies = self.tallies();
        let since = |tenant: &str, tally: &Tally| {
            let before = mark.0.get(tenant).copied().unwrap_or(0);
            tally.started.saturating_sub(before)
        };
        let mut recounted: HashMap<String, Tally> = (tallies.iter())
            .map(|(tenant, tally)| {
                let started = since(tenant, tally);
                (
                    tenant.clone(),
                    Tally {
                        counted: 0,
                        started,
                    },
                )
            })
            .filter(|(_, tally)| tally.started > 0)
            .collect();
        for (tenant, counted) in counted {
            recounted.entry(tenant).or_default().counted = counted;
        }
        *tallies = recounted;
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
        let mark = live.mark();
        live.recount(vec![("a".into(), 9), ("b".into(), 12)], &mark);
        assert_eq!(
            (live.room("a"), live.room("b")),
            (1, 0),
            "starts counted anew"
        );
        live.started("a", 5);
        assert_eq!(live.room("a"), 0);
        assert!(!live.admit("a"), "no room, not counted");
        assert_eq!(live.room("a"), 0);
        live.recount(vec![], &live.mark());
        assert_eq!(live.room("a"), 10, "none live");
    }

    #[test]
    fn admitting_takes_the_last_room_and_then_refuses() {
        let live = LiveInstances::new(2);
        live.started("a", 1);
        assert!(live.admit("a"));
        assert_eq!(live.room("a"), 0);
        assert!(!live.admit("a"));
        assert_eq!(
            (live.room("a"), live.room("b")),
            (0, 2),
            "a refusal counts nothing"
        );
    }

    #[test]
    fn a_start_made_while_a_count_ran_is_not_forgotten_by_it() {
        let live = LiveInstances::new(10);
        live.started("a", 2);
        let mark = live.mark();
        // Started while the count ran, and committed after it read the tenant's rows.
        live.started("a", 3);
        live.started("c", 1);
        live.recount(vec![("a".into(), 2)], &mark);
        assert_eq!((live.room("a"), live.room("c")), (5, 9));
    }
}
