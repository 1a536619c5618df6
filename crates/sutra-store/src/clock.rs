//! The one clock every time read and every wait of the engine, the embedded store and the server
//! goes through (decision 0045).
//!
//! A [`Clock`] is the system's in production: the wall clock, the monotonic clock and tokio's
//! timers. A test holds a [`ManualClock`] instead, which stands still until the test advances it,
//! so that a timer, a backoff, a lock or a claim timeout is crossed in a moment of real time, and
//! never crossed early. Its waits complete when an advance passes their deadline, and only then:
//! nothing advances it behind the test's back (tokio's paused time would, whenever every task
//! waits — as they do while a database driver works on a thread of its own).
//!
//! The core stays clock-free: the engine reads `now` here and passes it into each step.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use tokio::sync::watch;

/// A cheap handle on the system clock or on a [`ManualClock`].
#[derive(Clone)]
pub struct Clock(Kind);

#[derive(Clone)]
enum Kind {
    System,
    Manual(Arc<Manual>),
}

/// A manual clock's state: where it started and how far it has been advanced since.
struct Manual {
    start: Timestamp,
    origin: Instant,
    advanced: watch::Sender<Duration>,
}

/// A wait given up because its deadline passed first ([`Clock::timeout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Elapsed;

impl std::fmt::Display for Elapsed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("deadline has elapsed")
    }
}

impl std::error::Error for Elapsed {}

impl Clock {
    /// The system's clocks and tokio's timers.
    pub fn system() -> Clock {
        Clock(Kind::System)
    }

    /// The wall time, to the microsecond the stores keep, so that a record returned from a write
    /// equals the record read back later.
    pub fn now(&self) -> Timestamp {
        let now = match &self.0 {
            Kind::System => Timestamp::now(),
            Kind::Manual(manual) => manual.now(),
        };
        Timestamp::from_microsecond(now.as_microsecond()).expect("now is in range")
    }

    /// The monotonic time, for deadlines and elapsed times that no wall-clock step may move.
    pub fn instant(&self) -> Instant {
        match &self.0 {
            Kind::System => Instant::now(),
            Kind::Manual(manual) => manual.instant(),
        }
    }

    /// How long since `started`, a reading of [`Clock::instant`].
    pub fn elapsed(&self, started: Instant) -> Duration {
        self.instant().saturating_duration_since(started)
    }

    /// Waits `duration`. A duration past the end of time waits forever.
    pub async fn sleep(&self, duration: Duration) {
        match &self.0 {
            Kind::System => tokio::time::sleep(duration).await,
            Kind::Manual(manual) => manual.sleep(duration).await,
        }
    }

    /// Waits until `deadline`, a reading of [`Clock::instant`]; not at all if it has passed.
    pub async fn sleep_until(&self, deadline: Instant) {
        match &self.0 {
            Kind::System => tokio::time::sleep_until(deadline.into()).await,
            Kind::Manual(manual) => manual.sleep_until(deadline).await,
        }
    }

    /// `future`'s output, or [`Elapsed`] if `duration` passes first.
    pub async fn timeout<F: Future>(
        &self,
        duration: Duration,
        future: F,
    ) -> Result<F::Output, Elapsed> {
        match self.instant().checked_add(duration) {
            Some(deadline) => self.timeout_at(deadline, future).await,
            None => Ok(future.await),
        }
    }

    /// `future`'s output, or [`Elapsed`] if `deadline` (a reading of [`Clock::instant`]) passes
    /// first.
    pub async fn timeout_at<F: Future>(
        &self,
        deadline: Instant,
        future: F,
    ) -> Result<F::Output, Elapsed> {
        tokio::select! {
            biased;
            output = future => Ok(output),
            () = self.sleep_until(deadline) => Err(Elapsed),
        }
    }
}

impl std::fmt::Debug for Clock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Kind::System => f.write_str("Clock::System"),
            Kind::Manual(manual) => write!(f, "Clock::Manual({})", manual.now()),
        }
    }
}

impl Manual {
    fn advanced(&self) -> Duration {
        *self.advanced.borrow()
    }

    fn now(&self) -> Timestamp {
        let advanced =
            jiff::SignedDuration::try_from(self.advanced()).unwrap_or(jiff::SignedDuration::MAX);
        self.start
            .saturating_add(advanced)
            .unwrap_or(Timestamp::MAX)
    }

    fn instant(&self) -> Instant {
        self.origin + self.advanced()
    }

    async fn sleep(&self, duration: Duration) {
        match self.advanced().checked_add(duration) {
            Some(until) => self.until_advanced(until).await,
            None => std::future::pending().await,
        }
    }

    async fn sleep_until(&self, deadline: Instant) {
        self.until_advanced(deadline.saturating_duration_since(self.origin))
            .await;
    }

    /// Returns once the clock has been advanced by `until` in all.
    async fn until_advanced(&self, until: Duration) {
        let mut advanced = self.advanced.subscribe();
        // The sender lives as long as `self`, so the wait ends only by an advance.
        let _ = advanced.wait_for(|advanced| *advanced >= until).await;
    }
}

/// A clock that stands still until it is advanced: for tests, which hand
/// [`ManualClock::clock`] to what they drive and move time on with [`ManualClock::advance`].
#[derive(Clone)]
pub struct ManualClock(Arc<Manual>);

impl ManualClock {
    /// A clock whose wall time starts at `start` (its monotonic time at this moment's).
    pub fn starting_at(start: Timestamp) -> ManualClock {
        ManualClock(Arc::new(Manual {
            start,
            origin: Instant::now(),
            advanced: watch::Sender::new(Duration::ZERO),
        }))
    }

    /// The handle to hand out: every reading and wait of it follows this clock.
    pub fn clock(&self) -> Clock {
        Clock(Kind::Manual(Arc::clone(&self.0)))
    }

    /// Moves time on by `by`, completing every wait whose deadline it reaches.
    pub fn advance(&self, by: Duration) {
        self.0.advanced.send_modify(|advanced| *advanced += by);
    }

    pub fn now(&self) -> Timestamp {
        self.clock().now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().expect("a timestamp")
    }

    #[tokio::test]
    async fn a_manual_clock_moves_only_when_advanced() {
        let manual = ManualClock::starting_at(start());
        let clock = manual.clock();
        let before = clock.instant();
        assert_eq!(clock.now(), start());
        manual.advance(Duration::from_secs(90));
        assert_eq!(clock.now(), start() + jiff::SignedDuration::from_secs(90));
        assert_eq!(clock.instant() - before, Duration::from_secs(90));
    }

    #[tokio::test]
    async fn a_manual_wait_ends_once_an_advance_reaches_its_deadline_and_not_before() {
        let manual = ManualClock::starting_at(start());
        let clock = manual.clock();
        let sleep = tokio::spawn({
            let clock = clock.clone();
            async move { clock.sleep(Duration::from_secs(10)).await }
        });
        tokio::task::yield_now().await;
        manual.advance(Duration::from_secs(9));
        tokio::task::yield_now().await;
        assert!(!sleep.is_finished());
        manual.advance(Duration::from_secs(1));
        sleep.await.expect("the sleep ends");
    }

    #[tokio::test]
    async fn a_manual_timeout_elapses_only_by_an_advance() {
        let manual = ManualClock::starting_at(start());
        let clock = manual.clock();
        let waiting = tokio::spawn({
            let clock = clock.clone();
            async move {
                clock
                    .timeout(Duration::from_secs(5), std::future::pending::<()>())
                    .await
            }
        });
        tokio::task::yield_now().await;
        manual.advance(Duration::from_secs(5));
        assert_eq!(waiting.await.expect("the wait ends"), Err(Elapsed));
        let answered = clock.timeout(Duration::from_secs(5), async { 7 }).await;
        assert_eq!(answered, Ok(7));
    }

    #[tokio::test]
    async fn a_wait_past_the_end_of_time_never_ends() {
        let clock = ManualClock::starting_at(start()).clock();
        let answered = clock.timeout(Duration::MAX, async { 1 }).await;
        assert_eq!(answered, Ok(1));
    }
}
