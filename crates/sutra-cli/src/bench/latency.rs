//! Client-observed step latencies: a mark when a step becomes due, a sample when its effect is
//! seen, and the percentiles of all samples at the end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Shared by the drivers and the worker; cheap to clone.
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// When the step now due for each instance (by key) became due.
    due: HashMap<String, Instant>,
    samples: Vec<Duration>,
}

impl Recorder {
    /// A step of instance `key` becomes due now.
    pub fn mark(&self, key: &str) {
        self.lock().due.insert(key.to_owned(), Instant::now());
    }

    /// The step due for instance `key` is seen done: one sample. Nothing when no step is due,
    /// as for a task handed out again after a lost lock.
    pub fn step_seen(&self, key: &str) {
        let mut inner = self.lock();
        if let Some(due) = inner.due.remove(key) {
            inner.samples.push(due.elapsed());
        }
    }

    /// Instance `key` has ended.
    pub fn forget(&self, key: &str) {
        self.lock().due.remove(key);
    }

    /// The 50th and 99th percentiles of the samples so far (nearest rank), `None` without any.
    pub fn percentiles(&self) -> Option<(Duration, Duration)> {
        let mut samples = self.lock().samples.clone();
        samples.sort_unstable();
        let rank = |p: usize| samples[(samples.len() * p).div_ceil(100).max(1) - 1];
        (!samples.is_empty()).then(|| (rank(50), rank(99)))
    }

    pub fn samples(&self) -> usize {
        self.lock().samples.len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panicking driver leaves the samples as they were: still worth reporting.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
