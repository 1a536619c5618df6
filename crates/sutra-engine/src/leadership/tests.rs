use std::sync::atomic::{AtomicUsize, Ordering};

use sutra_store::ManualClock;

use super::*;

const SECOND: Duration = Duration::from_secs(1);

/// A role loop that counts its starts and how many of its runs are alive.
#[derive(Default)]
struct Probe {
    starts: AtomicUsize,
    alive: AtomicUsize,
}

struct Alive<'a>(&'a AtomicUsize);

impl Drop for Alive<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Probe {
    async fn run(&self) {
        self.starts.fetch_add(1, Ordering::SeqCst);
        self.alive.fetch_add(1, Ordering::SeqCst);
        let _alive = Alive(&self.alive);
        std::future::pending::<()>().await;
    }

    fn seen(&self) -> (usize, usize) {
        (
            self.starts.load(Ordering::SeqCst),
            self.alive.load(Ordering::SeqCst),
        )
    }
}

fn clock() -> ManualClock {
    ManualClock::starting_at(jiff::Timestamp::UNIX_EPOCH)
}

fn term(epoch: i64, lasting: Duration, clock: &ManualClock) -> Option<Term> {
    Some(Term {
        epoch,
        until: Some(clock.clock().instant() + lasting),
    })
}

/// Starts a role loop over `probe`; returns what drives it.
fn role(
    probe: &Arc<Probe>,
    clock: &ManualClock,
) -> (
    watch::Sender<Option<Term>>,
    watch::Sender<bool>,
    JoinHandle<()>,
) {
    let (lead, signal) = watch::channel(None);
    let (stop, stopping) = watch::channel(false);
    let probe = Arc::clone(probe);
    let clock = clock.clock();
    let running = tokio::spawn(async move {
        while_leading("test", signal, stopping, || probe.run(), &clock).await;
    });
    (lead, stop, running)
}

/// Moves `clock` on by `by`, and lets what that wakes run.
async fn advance(clock: &ManualClock, by: Duration) {
    clock.advance(by);
    settle().await;
}

/// Lets every task that can run, run.
async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn work_runs_only_within_a_term_and_stops_at_its_local_deadline() {
    let probe = Arc::new(Probe::default());
    let clock = clock();
    let (lead, _stop, _running) = role(&probe, &clock);
    settle().await;
    assert_eq!(probe.seen(), (0, 0), "no term, no work");

    lead.send_replace(term(1, 3 * SECOND, &clock));
    settle().await;
    assert_eq!(probe.seen(), (1, 1));
    advance(&clock, 2 * SECOND).await;
    assert_eq!(probe.seen(), (1, 1), "still within the term");
    advance(&clock, 2 * SECOND).await;
    assert_eq!(
        probe.seen(),
        (1, 0),
        "stopped at the deadline, with no word from the lease"
    );
}

#[tokio::test]
async fn a_renewal_extends_the_term_and_keeps_the_work_running() {
    let probe = Arc::new(Probe::default());
    let clock = clock();
    let (lead, _stop, _running) = role(&probe, &clock);
    lead.send_replace(term(1, 3 * SECOND, &clock));
    settle().await;

    for _ in 0..5 {
        advance(&clock, 2 * SECOND).await;
        lead.send_replace(term(1, 3 * SECOND, &clock));
        settle().await;
    }

    assert_eq!(probe.seen(), (1, 1), "one run across every renewal");
}

#[tokio::test]
async fn losing_the_lease_or_a_new_epoch_ends_the_run() {
    let probe = Arc::new(Probe::default());
    let clock = clock();
    let (lead, _stop, _running) = role(&probe, &clock);
    lead.send_replace(term(1, 3 * SECOND, &clock));
    settle().await;

    lead.send_replace(None);
    settle().await;
    assert_eq!(probe.seen(), (1, 0), "lost");
    lead.send_replace(term(2, 3 * SECOND, &clock));
    settle().await;
    assert_eq!(probe.seen(), (2, 1), "won again");
    lead.send_replace(term(4, 3 * SECOND, &clock));
    settle().await;
    assert_eq!(probe.seen(), (3, 1), "another led in between: a fresh run");
}

#[tokio::test]
async fn stopping_ends_the_loop_for_good() {
    let probe = Arc::new(Probe::default());
    let clock = clock();
    let (lead, stop, running) = role(&probe, &clock);
    lead.send_replace(term(1, 3 * SECOND, &clock));
    settle().await;

    stop.send_replace(true);
    running.await.unwrap();

    assert_eq!(probe.seen(), (1, 0));
}

#[tokio::test]
async fn a_term_granted_too_late_to_act_on_starts_nothing() {
    let probe = Arc::new(Probe::default());
    let clock = clock();
    let (lead, _stop, _running) = role(&probe, &clock);

    lead.send_replace(term(1, Duration::ZERO, &clock));
    settle().await;

    assert_eq!(probe.seen(), (0, 0));
}

#[test]
fn a_term_ends_a_fifth_of_the_ttl_before_the_lease_can() {
    assert_eq!(
        local_term(SignedDuration::from_secs(30)),
        Duration::from_secs(24)
    );
}
