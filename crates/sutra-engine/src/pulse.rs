//! The replica's pulse (docs/decisions/0061): what its steps did over the last fifteen minutes,
//! one sample every ten seconds, kept in memory for the console's System page.
//!
//! Each step's end is counted here as it happens — committed or not, how long it took, whether
//! it failed its instance — in counters a sampler takes (and so resets) once per
//! [`SAMPLE_INTERVAL`], adding the backlog the database counts at that moment. The samples are
//! this replica's alone: nothing is written to the store, and a replica that starts has none.
//!
//! Every step is counted twice: for the replica, and for its tenant, whose administrator sees
//! only its own figures (decision 0076). A tenant's counters exist from its first step in an
//! interval until the take, so they and each sample hold only the tenants that stepped in that
//! interval: the memory is bounded by the tenants with deployments, whose definitions the
//! replica holds anyway, times the samples kept.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock};
use std::time::Duration;

use jiff::Timestamp;
use sutra_store::Backlog;

/// How often a sample is taken.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(10);

/// How many samples are kept: fifteen minutes of them.
pub const SAMPLES_KEPT: usize = 90;

/// The step latency buckets, in seconds (upper bounds, as Prometheus' `le`): those of
/// `sutra_step_duration_seconds` too, so that a sample's quantiles are what
/// `histogram_quantile` gives over the scraped histogram. A step is one transaction, from a
/// millisecond on an idle embedded store to seconds on a saturated database.
pub const STEP_BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// One interval of this replica, ending at `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: Timestamp,
    /// How long the interval was, as measured: about [`SAMPLE_INTERVAL`].
    pub seconds: f64,
    /// Steps that committed.
    pub steps: u64,
    /// Steps that ended without committing: stale, rejected, unpinned, failed or panicked.
    pub steps_failed: u64,
    /// Instances a committed step failed in place.
    pub instances_failed: u64,
    /// The latency of every step that ended in the interval; `None` when none did.
    pub latency: Option<Latency>,
    /// The fleet's backlog as the database counted it at `at`; `None` when it could not be
    /// counted in time.
    pub backlog: Option<Depth>,
}

/// Step latency quantiles, in seconds, estimated from [`STEP_BUCKETS`] as `histogram_quantile`
/// does: linearly within the bucket the rank falls in, and the highest bound past it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub p50: f64,
    pub p99: f64,
}

/// What waits for the fleet: the backlog gauges of SPEC §8, the task topics summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Depth {
    pub inbox: u64,
    pub outbox: u64,
    pub tasks_available: u64,
}

impl Depth {
    pub fn of(backlog: &Backlog) -> Depth {
        Depth {
            inbox: backlog.inbox,
            outbox: backlog.outbox,
            tasks_available: backlog.available(),
        }
    }
}

/// What was counted since the last take, for the replica or for one tenant: nothing when
/// nothing stepped.
#[derive(Debug, Default)]
struct Counted {
    steps: u64,
    steps_failed: u64,
    instances_failed: u64,
    latency: Option<Latency>,
}

/// What one take found: the replica's counts, and each tenant's that stepped.
#[derive(Debug)]
pub(crate) struct Taken {
    replica: Counted,
    tenants: HashMap<String, Counted>,
}

/// The counters a step's end adds to.
#[derive(Default)]
struct Counters {
    steps: AtomicU64,
    steps_failed: AtomicU64,
    instances_failed: AtomicU64,
    /// Steps by latency bucket; the last counts those past the highest bound.
    latency: [AtomicU64; STEP_BUCKETS.len() + 1],
}

impl Counters {
    fn step(&self, committed: bool, took: Duration) {
        let counter = if committed {
            &self.steps
        } else {
            &self.steps_failed
        };
        counter.fetch_add(1, Ordering::Relaxed);
        let seconds = took.as_secs_f64();
        let bucket = STEP_BUCKETS.partition_point(|bound| *bound < seconds);
        self.latency[bucket].fetch_add(1, Ordering::Relaxed);
    }

    fn instance_failed(&self) {
        self.instances_failed.fetch_add(1, Ordering::Relaxed);
    }

    /// What was counted, the counters reset.
    fn take(&self) -> Counted {
        let take = |counter: &AtomicU64| counter.swap(0, Ordering::Relaxed);
        let buckets: Vec<u64> = self.latency.iter().map(take).collect();
        Counted {
            steps: take(&self.steps),
            steps_failed: take(&self.steps_failed),
            instances_failed: take(&self.instances_failed),
            latency: Latency::of(&buckets),
        }
    }
}

/// One interval as kept: the replica's counts, each tenant's that stepped, the fleet's backlog.
struct Kept {
    at: Timestamp,
    seconds: f64,
    taken: Taken,
    backlog: Option<Depth>,
}

/// The counters the steps add to, and the samples kept.
pub struct Pulse {
    /// When this replica started counting: it has no sample from before.
    since: Timestamp,
    replica: Counters,
    /// The tenants that stepped since the last take, each with its own counters.
    tenants: RwLock<HashMap<String, Counters>>,
    kept: Mutex<VecDeque<Kept>>,
}

impl Pulse {
    pub(crate) fn new(since: Timestamp) -> Pulse {
        Pulse {
            since,
            replica: Counters::default(),
            tenants: RwLock::new(HashMap::new()),
            kept: Mutex::new(VecDeque::with_capacity(SAMPLES_KEPT)),
        }
    }

    pub fn since(&self) -> Timestamp {
        self.since
    }

    /// One step of `tenant`'s ended, `took` after it started.
    pub(crate) fn step(&self, tenant: &str, committed: bool, took: Duration) {
        self.replica.step(committed, took);
        self.tenant(tenant, |counters| counters.step(committed, took));
    }

    /// A committed step failed an instance of `tenant`'s in place.
    pub(crate) fn instance_failed(&self, tenant: &str) {
        self.replica.instance_failed();
        self.tenant(tenant, Counters::instance_failed);
    }

    /// Counts on `tenant`'s counters, made by its first step since the last take. The count is
    /// made under the map's lock, so that a take, which replaces the map under it, never misses
    /// one.
    fn tenant(&self, tenant: &str, count: impl Fn(&Counters)) {
        {
            let tenants = self.tenants.read().unwrap_or_else(|p| p.into_inner());
            if let Some(counters) = tenants.get(tenant) {
                count(counters);
                return;
            }
        }
        let mut tenants = self.tenants.write().unwrap_or_else(|p| p.into_inner());
        count(tenants.entry(tenant.to_owned()).or_default());
    }

    /// What was counted since the last take, the counters reset. A step ending meanwhile may be
    /// counted in one counter of this take and another of the next: the sample it straddles is
    /// off by that one step.
    pub(crate) fn take(&self) -> Taken {
        let tenants = std::mem::take(&mut *self.tenants.write().unwrap_or_else(|p| p.into_inner()));
        Taken {
            replica: self.replica.take(),
            tenants: tenants
                .into_iter()
                .map(|(tenant, counters)| (tenant, counters.take()))
                .collect(),
        }
    }

    /// Keeps a sample of `taken` over the `seconds` ending `at`, dropping the oldest past
    /// [`SAMPLES_KEPT`].
    pub(crate) fn keep(&self, at: Timestamp, seconds: f64, taken: Taken, backlog: Option<Depth>) {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if kept.len() == SAMPLES_KEPT {
            kept.pop_front();
        }
        kept.push_back(Kept {
            at,
            seconds,
            taken,
            backlog,
        });
    }

    /// The samples kept, oldest first: of the replica's steps and the fleet's backlog, or of
    /// `tenant`'s steps alone, without a backlog (which is counted for the fleet only).
    pub fn samples(&self, tenant: Option<&str>) -> Vec<Sample> {
        let kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        kept.iter().map(|kept| kept.sample(tenant)).collect()
    }
}

impl Kept {
    fn sample(&self, tenant: Option<&str>) -> Sample {
        let none = Counted::default();
        let (counted, backlog) = match tenant {
            None => (&self.taken.replica, self.backlog),
            Some(tenant) => (self.taken.tenants.get(tenant).unwrap_or(&none), None),
        };
        Sample {
            at: self.at,
            seconds: self.seconds,
            steps: counted.steps,
            steps_failed: counted.steps_failed,
            instances_failed: counted.instances_failed,
            latency: counted.latency,
            backlog,
        }
    }
}

impl Latency {
    /// The quantiles of steps counted by bucket; `None` when there are none.
    fn of(buckets: &[u64]) -> Option<Latency> {
        Some(Latency {
            p50: quantile(0.5, buckets)?,
            p99: quantile(0.99, buckets)?,
        })
    }
}

/// The `q`-quantile of the steps counted in `buckets` (by [`STEP_BUCKETS`], and one past them),
/// as Prometheus' `histogram_quantile` estimates it.
fn quantile(q: f64, buckets: &[u64]) -> Option<f64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    // Counts far below 2^52: exact as floats.
    let rank = q * total as f64;
    let mut below = 0.0;
    for (index, &count) in buckets.iter().enumerate() {
        let count = count as f64;
        if count > 0.0 && below + count >= rank {
            let Some(&upper) = STEP_BUCKETS.get(index) else {
                return STEP_BUCKETS.last().copied();
            };
            let lower = index.checked_sub(1).map_or(0.0, |i| STEP_BUCKETS[i]);
            return Some(lower + (upper - lower) * (rank - below) / count);
        }
        below += count;
    }
    STEP_BUCKETS.last().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn near(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + seconds).unwrap()
    }

    const ACME: &str = "acme";
    const GLOBEX: &str = "globex";

    #[test]
    fn a_take_counts_the_steps_since_the_last_and_resets() {
        let pulse = Pulse::new(at(0));
        for _ in 0..3 {
            pulse.step(ACME, true, 2 * MS);
        }
        pulse.step(ACME, false, 2 * MS);
        pulse.instance_failed(ACME);
        let counted = pulse.take().replica;
        assert_eq!(
            (
                counted.steps,
                counted.steps_failed,
                counted.instances_failed
            ),
            (3, 1, 1)
        );
        let none = pulse.take().replica;
        assert_eq!((none.steps, none.steps_failed, none.latency), (0, 0, None));
    }

    #[test]
    fn the_quantiles_are_histogram_quantiles_estimates() {
        let pulse = Pulse::new(at(0));
        // 98 steps in (1 ms, 2.5 ms], two in (25 ms, 50 ms].
        for _ in 0..98 {
            pulse.step(ACME, true, 2 * MS);
        }
        for _ in 0..2 {
            pulse.step(ACME, true, 30 * MS);
        }
        let latency = pulse.take().replica.latency.unwrap();
        // The 50th of 98 in (0.001, 0.0025]: 0.001 + 0.0015 × 50/98.
        assert!(near(latency.p50, 0.001 + 0.0015 * 50.0 / 98.0));
        // The 99th: the first of two in (0.025, 0.05], half way into it.
        assert!(near(latency.p99, 0.0375));
    }

    #[test]
    fn a_step_on_a_bound_is_in_its_bucket_and_past_the_last_bound_reads_as_it() {
        let pulse = Pulse::new(at(0));
        pulse.step(ACME, true, Duration::from_secs_f64(0.001));
        assert!(near(pulse.take().replica.latency.unwrap().p99, 0.00099));
        pulse.step(ACME, true, Duration::from_secs(30));
        assert_eq!(
            pulse.take().replica.latency,
            Some(Latency { p50: 5.0, p99: 5.0 })
        );
    }

    #[test]
    fn fifteen_minutes_are_kept_oldest_first() {
        let pulse = Pulse::new(at(0));
        for n in 1..=(SAMPLES_KEPT as i64 + 5) {
            pulse.step(ACME, true, MS);
            pulse.keep(at(10 * n), 10.0, pulse.take(), None);
        }
        let samples = pulse.samples(None);
        assert_eq!(samples.len(), SAMPLES_KEPT);
        assert_eq!(samples[0].at, at(60));
        assert_eq!(
            samples.last().unwrap().at,
            at(10 * (SAMPLES_KEPT as i64 + 5))
        );
        assert!(samples.iter().all(|sample| sample.steps == 1));
    }

    #[test]
    fn a_tenants_samples_hold_its_own_steps_and_no_backlog() {
        let pulse = Pulse::new(at(0));
        pulse.step(ACME, true, 2 * MS);
        pulse.step(ACME, false, 2 * MS);
        pulse.instance_failed(ACME);
        pulse.step(GLOBEX, true, 30 * MS);
        let depth = Depth {
            inbox: 1,
            outbox: 2,
            tasks_available: 3,
        };
        pulse.keep(at(10), 10.0, pulse.take(), Some(depth));

        let [acme] = <[Sample; 1]>::try_from(pulse.samples(Some(ACME))).unwrap();
        assert_eq!(
            (
                acme.steps,
                acme.steps_failed,
                acme.instances_failed,
                acme.backlog
            ),
            (1, 1, 1, None)
        );
        assert!(acme.latency.unwrap().p99 < 0.0025);
        let [nobody] = <[Sample; 1]>::try_from(pulse.samples(Some("initech"))).unwrap();
        assert_eq!((nobody.steps, nobody.latency, nobody.at), (0, None, at(10)));
        let [replica] = <[Sample; 1]>::try_from(pulse.samples(None)).unwrap();
        assert_eq!((replica.steps, replica.backlog), (2, Some(depth)));
    }

    #[test]
    fn a_take_keeps_no_counters_of_the_tenants_it_took() {
        let pulse = Pulse::new(at(0));
        pulse.step(ACME, true, MS);
        assert_eq!(pulse.take().tenants.len(), 1);
        pulse.step(GLOBEX, true, MS);
        let taken = pulse.take();
        assert_eq!(taken.tenants.keys().collect::<Vec<_>>(), [GLOBEX]);
        assert!(pulse.take().tenants.is_empty());
    }
}
