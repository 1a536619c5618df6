//! Chaos: the replica workload of `replicas.rs` while a nemesis kills, freezes and cuts off
//! replicas, and restarts PostgreSQL under them (SPEC §5–§6; what DBOS and Temporal users hit:
//! a database restart mid-recovery stranding work, a slow-but-not-dead owner running a step
//! twice).
//!
//! For a bounded window, with a seeded schedule, while transfers arrive at a steady pace:
//! - every few seconds a random replica is killed with SIGKILL — mid-step when it can be caught
//!   holding a claim — and, a moment later, started again as a new incarnation on the same
//!   address;
//! - one replica is frozen with SIGSTOP between a claim and its commit, and resumed with SIGCONT
//!   only once its claim has lapsed and another replica has taken the instance: a live holder
//!   whose late commit must land nothing. A lane's claim is its step transaction's row lock
//!   (decision 0024): it lapses when PostgreSQL ends the frozen holder's idle session, and the
//!   commit the holder resumes with meets a closed connection; an administrative claim is the
//!   owner column, and its late commit meets the fence;
//! - PostgreSQL itself is stopped (an immediate shutdown: a crash, to the replicas) just before
//!   the claim of a replica killed mid-step lapses — so that the sweep that must clear it meets a
//!   database that went away — and started again. Replicas ride through: pools reconnect, sweeps
//!   and lease polls run again, a replica that cannot reach the database at start is started
//!   again;
//! - each replica reaches the database through a loopback proxy of its own
//!   (`sutra_testkit::proxy`): one replica is cut off from the database (a partition: nothing
//!   forwarded, nothing closed) for up to past the lease TTL, one has its traffic slowed for a
//!   few seconds, and one has every connection reset at once.
//!
//! To catch a replica mid-step the nemesis freezes it for a few milliseconds and reads, past
//! row-level security, which claims it holds — owner columns naming it, and instance rows its
//! sessions hold locked (`pgrowlocks`, the sessions named by `application_name`); a replica
//! caught holding none is thawed at once.
//!
//! Beside the transfers, orders run the rest of the language (`common::shop`): each calls a
//! child flow per box from a `for-each` of three, races a message against a timer, and undoes
//! its booking through a compensation scope; and a schedule starts an instance every second
//! until a second version of the shop, deployed once the window is over, stops it.
//!
//! Senders retry every refused or failed send with the same event id until a replica accepts
//! it; workers reconnect on their own. Afterwards the invariants of the workload hold (see
//! `common::audit`): every accepted event consumed exactly once, no instance advanced twice,
//! every transfer completed within the recovery bound of the last fault, every claim a killed
//! replica held cleared, every outbox row sent (the ledger may hear a key twice, never an
//! unknown one), nothing left claimed or asked, and every lease role held by exactly one live
//! replica within `ttl + poll` of the last fault. And the history every replica recorded passes
//! the history checker (`common::history`, decision 0043): one chain of commits per instance,
//! no answer before its commit, no two leaders of a role at once, every message consumed once;
//! and of the orders (`common::shop::audit_orders`, and the checker's rules over calls,
//! compensations and ticks): every order completed with its three children's replies in box
//! order, each child heard of once, each completion compensated once, every tick started once.
//!
//! The database is a cluster of the test's own (`DedicatedCluster`), so restarting it disturbs
//! no other test. `SUTRA_CHAOS_SEED` replays a schedule (the faults and their victims; the
//! processes' own timing still varies); `SUTRA_CHAOS_SECONDS` lengthens the window (default
//! 25 s); `SUTRA_CHAOS_LANES` sets every replica's `sutra.engine.lanes` (default: 1 for an odd
//! seed, 4 for an even one). What the nemesis did is printed as it happens: `-- --nocapture`
//! shows it, starting with the seed and the lane count.

mod common;

use std::time::{Duration, Instant};

use common::shop::{ORDERS_PER_SECOND, audit_orders, send_orders_paced, shop, wait_for_orders};
use common::{
    Accepted, Fleet, LeaseCheck, Timing, Workers, assert_every_role_led_by_one_live_replica,
    assert_nothing_stranded, assert_resends_are_duplicates, audit, distinct, heard, history,
    send_paced, transfers, wait_for_ledger,
};
use sutra_testkit::Receiver;
use sutra_testkit::postgres::{self, DedicatedCluster};
use tokio::task::JoinHandle;

const REPLICAS: usize = 3;
const DEFAULT_WINDOW: Duration = Duration::from_secs(25);
/// Transfers started per second of the window: enough that every fault lands on work in flight,
/// few enough that the fleet keeps up on two cores.
const TRANSFERS_PER_SECOND: f64 = 12.0;
/// The first kill comes this long after traffic starts; none comes later than this before the
/// window ends.
const QUIET_EDGE: Duration = Duration::from_secs(2);
/// How long a killed replica stays down before its restart: a uniform pick in this range.
const KILLED_FOR: (Duration, Duration) = (Duration::from_millis(200), Duration::from_millis(1000));
/// Between two kills: a uniform pick in this range.
const BETWEEN_KILLS: (Duration, Duration) =
    (Duration::from_millis(2500), Duration::from_millis(4500));
/// How long PostgreSQL stays down: a uniform pick in this range, well past a sweep interval so
/// that sweeps and polls fail and must simply run again.
const DATABASE_DOWN_FOR: (Duration, Duration) =
    (Duration::from_millis(1000), Duration::from_millis(2000));
/// A replica that could not start (its database was away) is tried again after this.
const RESTART_RETRY: Duration = Duration::from_millis(300);
/// Brief freezes tried before one catches a replica between a claim and its commit (a window
/// of a millisecond or so per step), with this pause between two.
const FREEZE_TRIES: u32 = 400;
const FREEZE_PAUSE: Duration = Duration::from_millis(5);
/// Brief freezes of a kill's victim tried before it is killed whatever it holds (a replica
/// that does not lead `timers` holds no claims to catch).
const KILL_TRIES: u32 = 40;
/// How long a replica stays cut off from the database: a uniform pick in this range, which
/// reaches past the lease TTL of [`Timing::SHORT`].
const PARTITIONED_FOR: (Duration, Duration) =
    (Duration::from_millis(500), Duration::from_millis(3500));
/// How much a slowed replica's database traffic is delayed, each chunk each way, and for how
/// long: uniform picks in these ranges.
const LATENCY: (Duration, Duration) = (Duration::from_millis(5), Duration::from_millis(60));
const SLOWED_FOR: (Duration, Duration) = (Duration::from_millis(1000), Duration::from_millis(4000));

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_ride_through_kills_freezes_and_a_database_restart() {
    let (seed, window, lanes) = settings();
    println!(
        "chaos: seed {seed}, lanes {lanes} (replay with SUTRA_CHAOS_SEED={seed} \
         SUTRA_CHAOS_LANES={lanes}), window {window:?}"
    );
    let timing = Timing::SHORT;
    let cluster = DedicatedCluster::start().await;
    let receiver = Receiver::accepting();
    let deployment = transfers(&receiver.url("/ledger"));
    let fleet = (Fleet::of("chaos", REPLICAS, timing).proxied().lanes(lanes))
        .start(cluster.url(), &deployment)
        .await;
    read_row_locks(cluster.admin_url()).await;
    fleet.replica(0).deploy_accepted(&shop(true)).await;
    let urls = fleet.urls();
    let workers = Workers::start(&urls, timing);
    let http = reqwest::Client::new();

    let senders = send_paced(&http, &urls, window, TRANSFERS_PER_SECOND);
    let order_senders = send_orders_paced(&http, &urls, window, ORDERS_PER_SECOND);
    let nemesis = Nemesis::new(fleet, &cluster, timing, seed);
    let (fleet, last_fault, crashes) = nemesis.unleash(window).await;
    let leases =
        assert_every_role_led_by_one_live_replica(&fleet, last_fault, timing.lease_bound()).await;
    // The ticks stop, so that the run settles: a version whose `tick` no schedule starts, while
    // the orders of the first version drain on it.
    fleet.replica(0).deploy_accepted(&shop(false)).await;
    let mut accepted = Vec::new();
    for sender in senders {
        accepted.push(sender.await.expect("a sender does not panic"));
    }
    let mut orders = Vec::new();
    for sender in order_senders {
        orders.push(sender.await.expect("a sender does not panic"));
    }
    let recovered = wait_for_ledger(
        &receiver,
        accepted.len(),
        last_fault,
        timing.recovery_bound(),
        fleet.replica(0),
    )
    .await;
    let orders_done = wait_for_orders(
        fleet.replica(0),
        &orders,
        last_fault,
        timing.recovery_bound(),
    )
    .await;
    let handler_runs = workers.handler_runs();
    workers.stop().await;

    let found = audit(fleet.replica(0), &accepted, &receiver).await;
    audit_orders(fleet.replica(0), &orders).await;
    // The history each replica recorded (decision 0043): one chain per instance, answers after
    // their commits, one leader per role, every accepted message consumed once; and of the
    // orders, every child ran and was heard of once, every completion compensated once, and
    // every tick started one instance.
    let heard = heard(&receiver);
    let started: Vec<Accepted> = accepted.iter().chain(&orders).cloned().collect();
    let histories = fleet.histories_settled(started.len(), distinct(&heard));
    let killed = fleet.killed();
    let history = history::check(&histories, &started, &heard, &killed, &crashes, seed);
    println!("chaos: {history}");
    history.assert_clean();
    assert!(history.ticks > 0, "no tick started an instance: {history}");
    assert_resends_are_duplicates(&http, &urls, &accepted).await;
    assert_nothing_stranded(cluster.admin_url()).await;
    let resent = accepted.iter().filter(|sent| sent.attempts > 1).count();
    println!(
        "chaos: {} transfers and {} orders accepted ({resent} transfers only after retries), \
         all completed exactly once; every transfer done {:.2} s and every order {:.2} s after \
         the last fault (bound {:?}); handler runs {} for {} transfer tasks; ledger duplicates \
         {}; leases {}",
        accepted.len(),
        orders.len(),
        recovered.as_secs_f64(),
        orders_done.as_secs_f64(),
        timing.recovery_bound(),
        handler_runs,
        2 * accepted.len(),
        found.ledger_duplicates,
        match leases {
            LeaseCheck::Held(after) => format!(
                "each held by one live replica {:.2} s after the last fault (bound {:?}: ttl + \
                 poll + slack)",
                after.as_secs_f64(),
                timing.lease_bound()
            ),
            LeaseCheck::NotServed => leases.to_string(),
        }
    );
}

/// The seed (`SUTRA_CHAOS_SEED`, else the clock), the window (`SUTRA_CHAOS_SECONDS`, else
/// [`DEFAULT_WINDOW`]) and each replica's lane count (`SUTRA_CHAOS_LANES`, else
/// [`lanes_for`] the seed).
fn settings() -> (u64, Duration, usize) {
    let seed = std::env::var("SUTRA_CHAOS_SEED")
        .ok()
        .map(|seed| seed.parse().expect("SUTRA_CHAOS_SEED is a number"))
        .unwrap_or_else(clock_seed);
    let window = std::env::var("SUTRA_CHAOS_SECONDS")
        .ok()
        .map(|s| Duration::from_secs(s.parse().expect("SUTRA_CHAOS_SECONDS is a number")))
        .unwrap_or(DEFAULT_WINDOW);
    let lanes = std::env::var("SUTRA_CHAOS_LANES")
        .ok()
        .map(|lanes| lanes.parse().expect("SUTRA_CHAOS_LANES is a number"))
        .unwrap_or_else(|| lanes_for(seed));
    (seed, window, lanes)
}

/// One lane for an odd seed, four for an even one: a campaign over consecutive seeds alternates,
/// because a run green at one lane proves nothing of the windows between lanes (group commit,
/// deferred acknowledgement, the hand-off; seed 001), and one at four lanes alone would stop
/// proving the one-lane default.
fn lanes_for(seed: u64) -> usize {
    if seed % 2 == 1 { 1 } else { 4 }
}

fn clock_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as u64)
}

/// A fault, due at an offset from the start of traffic.
#[derive(Debug, Clone)]
enum Fault {
    /// SIGKILL a random replica that is up and not frozen — mid-step, if it can be caught
    /// holding a claim — and restart it after `down_for`.
    Kill {
        down_for: Duration,
    },
    Restart {
        slot: usize,
    },
    /// SIGSTOP a replica caught between a claim and its commit, for at least `hold`.
    Freeze {
        hold: Duration,
    },
    /// SIGCONT the frozen replica, once another replica has taken over the instance it was
    /// caught holding (or the recovery bound has passed).
    Thaw {
        slot: usize,
        caught: Option<Claim>,
        frozen_at: Instant,
    },
    /// Kill a replica caught holding a claim, then stop PostgreSQL for `outage` just before
    /// that claim lapses: the sweep that must clear it meets a database that went away.
    KillBeforeOutage {
        outage: Duration,
    },
    /// Stop PostgreSQL (immediate shutdown); start it after `down_for`.
    DatabaseDown {
        down_for: Duration,
    },
    DatabaseUp {
        down_at: Instant,
    },
    /// Degrade the database connections of a replica that is up, for `hold`.
    Degrade {
        how: Degraded,
        hold: Duration,
    },
    /// End a partition or a slowing: what waited is forwarded.
    Heal {
        slot: usize,
        since: Instant,
    },
    /// Close every database connection of a replica at once, as a reset would.
    Reset,
}

/// How a replica's database connections are degraded in its proxy.
#[derive(Debug, Clone, Copy)]
enum Degraded {
    /// Nothing forwarded, nothing closed: a partition.
    CutOff,
    /// Each chunk delayed this long, each way.
    Slowed(Duration),
}

/// A claim seen in the database: the instance, and the fence the claim took.
#[derive(Debug, Clone)]
struct Claim {
    instance: String,
    fence: i64,
}

/// Watches the claims a killed replica died holding: its id, how many, and how long after the
/// kill the last was cleared (`None`: not within the recovery bound).
type ClaimWatch = JoinHandle<(String, usize, Option<Duration>)>;

struct Nemesis<'a> {
    fleet: Fleet,
    cluster: &'a DedicatedCluster,
    timing: Timing,
    rng: Rng,
    started: Instant,
    /// When the last fault ended: a kill, a replica started, one thawed, the database back.
    last_fault: Instant,
    sweeps: Vec<ClaimWatch>,
    /// When the database was down after each immediate shutdown, in wall-clock microseconds:
    /// the history checker's bound on a lock a crash may have lost unflushed.
    crashes: Vec<i64>,
}

impl<'a> Nemesis<'a> {
    fn new(fleet: Fleet, cluster: &'a DedicatedCluster, timing: Timing, seed: u64) -> Nemesis<'a> {
        let started = Instant::now();
        Nemesis {
            fleet,
            cluster,
            timing,
            rng: Rng(seed),
            started,
            last_fault: started,
            sweeps: Vec::new(),
            crashes: Vec::new(),
        }
    }

    /// Runs a seeded schedule of faults over `window`, until every replica is up again, none
    /// frozen and the database up; checks that every claim a killed replica died holding was
    /// cleared. Returns the fleet, when the last fault ended, and when the database crashed.
    async fn unleash(mut self, window: Duration) -> (Fleet, Instant, Vec<i64>) {
        let schedule = self.plan(window);
        self.run(schedule).await;
        for sweep in self.sweeps {
            let (id, claims, cleared) = sweep.await.expect("a claim watcher does not panic");
            let cleared = cleared.unwrap_or_else(|| {
                panic!("the {claims} claim(s) {id} died holding were never cleared")
            });
            println!(
                "chaos: the {claims} claim(s) {id} died holding were cleared {:.2} s after its kill",
                cleared.as_secs_f64()
            );
        }
        (self.fleet, self.last_fault, self.crashes)
    }

    /// Prints what the nemesis did as it happens, so that a failing run shows how far it got.
    fn tell(&self, what: &str) {
        println!(
            "chaos: {:>6.2} s  {what}",
            self.started.elapsed().as_secs_f64()
        );
    }

    /// The seeded schedule: kills every few seconds across the window, one freeze in its first
    /// half, and the database restart in its second half, after a kill of its own.
    fn plan(&mut self, window: Duration) -> Vec<(Duration, Fault)> {
        let mut schedule = Vec::new();
        let mut at = QUIET_EDGE;
        while at + QUIET_EDGE < window {
            let down_for = self.rng.between(KILLED_FOR);
            schedule.push((at, Fault::Kill { down_for }));
            at += self.rng.between(BETWEEN_KILLS);
        }
        let freeze_at = window.mul_f64(0.2 + 0.15 * self.rng.fraction());
        // Past the claim timeout, and past a sweep that clears the lapsed claim.
        let hold = 2 * self.timing.claim_timeout + self.timing.sweep_interval;
        schedule.push((freeze_at, Fault::Freeze { hold }));
        let database_at = window.mul_f64(0.55 + 0.15 * self.rng.fraction());
        let outage = self.rng.between(DATABASE_DOWN_FOR);
        schedule.push((database_at, Fault::KillBeforeOutage { outage }));
        let mut anywhere = || QUIET_EDGE + (window - 2 * QUIET_EDGE).mul_f64(self.rng.fraction());
        let (partition_at, slow_at, reset_at) = (anywhere(), anywhere(), anywhere());
        let hold = self.rng.between(PARTITIONED_FOR);
        let how = Degraded::CutOff;
        schedule.push((partition_at, Fault::Degrade { how, hold }));
        let how = Degraded::Slowed(self.rng.between(LATENCY));
        let hold = self.rng.between(SLOWED_FOR);
        schedule.push((slow_at, Fault::Degrade { how, hold }));
        schedule.push((reset_at, Fault::Reset));
        schedule
    }

    /// Runs the schedule, and whatever restarts and thaws it leads to, until every replica is
    /// up, none frozen, none cut off, and the database is up. Catching a replica holding a claim
    /// reads the database, so freezes and outages never overlap: whichever comes second waits.
    /// Nor do an outage and a replica's network fault, and a replica cut off or slowed is not
    /// killed: its next incarnation would start through the same proxy.
    async fn run(&mut self, mut schedule: Vec<(Duration, Fault)>) {
        let mut frozen: Option<usize> = None;
        let mut database_down = false;
        let mut cut_off: Option<usize> = None;
        loop {
            schedule.sort_by_key(|(at, _)| *at);
            if schedule.is_empty() {
                return;
            }
            let (at, fault) = schedule.remove(0);
            tokio::time::sleep_until((self.started + at).into()).await;
            let started = self.started;
            let later = |delay: Duration| started.elapsed() + delay;
            match fault {
                Fault::Freeze { .. } if database_down => {
                    schedule.push((later(RESTART_RETRY), fault));
                }
                Fault::KillBeforeOutage { .. } | Fault::DatabaseDown { .. }
                    if frozen.is_some() || cut_off.is_some() =>
                {
                    schedule.push((later(RESTART_RETRY), fault));
                }
                Fault::Degrade { .. } | Fault::Reset if database_down || cut_off.is_some() => {
                    schedule.push((later(RESTART_RETRY), fault));
                }
                Fault::Degrade { how, hold } => {
                    let Some(slot) = self.network_victim(frozen, cut_off) else {
                        continue;
                    };
                    let (proxy, id) = (self.fleet.proxy(slot), self.fleet.replica_id(slot));
                    let what = match how {
                        Degraded::CutOff => {
                            proxy.partition();
                            format!("{id} cut off from the database (partition), for {hold:?}")
                        }
                        Degraded::Slowed(latency) => {
                            proxy.delay(latency);
                            format!(
                                "{id}'s database traffic delayed {latency:?} each way, for {hold:?}"
                            )
                        }
                    };
                    cut_off = Some(slot);
                    let since = Instant::now();
                    schedule.push((later(hold), Fault::Heal { slot, since }));
                    self.tell(&what);
                }
                Fault::Heal { slot, since } => {
                    self.fleet.proxy(slot).heal();
                    self.last_fault = Instant::now();
                    cut_off = None;
                    self.tell(&format!(
                        "{}'s database connections healed after {:.2} s",
                        self.fleet.replica_id(slot),
                        since.elapsed().as_secs_f64()
                    ));
                }
                Fault::Reset => {
                    let Some(slot) = self.network_victim(frozen, cut_off) else {
                        continue;
                    };
                    self.fleet.proxy(slot).cut();
                    self.last_fault = Instant::now();
                    self.tell(&format!(
                        "{}'s database connections reset",
                        self.fleet.replica_id(slot)
                    ));
                }
                Fault::Kill { down_for } => {
                    let up: Vec<usize> = (self.up_slots(frozen).into_iter())
                        .filter(|slot| Some(*slot) != cut_off)
                        .collect();
                    let Some(&victim) = self.rng.pick(&up) else {
                        self.tell("kill: no replica up to kill");
                        continue;
                    };
                    let tries = if database_down { 0 } else { KILL_TRIES };
                    let slot = self.kill_a_holder(&[victim], tries).await;
                    schedule.push((later(down_for), Fault::Restart { slot }));
                }
                Fault::KillBeforeOutage { outage } => {
                    // Whoever holds claims — with leases, the `timers` leader — dies.
                    let mut up = self.up_slots(None);
                    let Some(first) = self.rng.pick(&up).copied() else {
                        self.tell("kill: no replica up to kill");
                        continue;
                    };
                    let start = up.iter().position(|slot| *slot == first).unwrap_or(0);
                    up.rotate_left(start);
                    let slot = self.kill_a_holder(&up, FREEZE_TRIES).await;
                    // It stays down through the outage, so that it starts while the database is
                    // away, and is started again.
                    let lead = self.timing.claim_timeout.mul_f64(0.9);
                    let down_for = lead + outage + self.rng.between(KILLED_FOR);
                    schedule.push((later(lead), Fault::DatabaseDown { down_for: outage }));
                    schedule.push((later(down_for), Fault::Restart { slot }));
                }
                Fault::Restart { slot } => {
                    let started = self.fleet.restart(slot);
                    let id = self.fleet.replica_id(slot);
                    if started.is_ok() {
                        self.last_fault = Instant::now();
                        self.tell(&format!("{id} started"));
                    } else {
                        self.tell(&format!("{id} could not start (database away); again soon"));
                        schedule.push((later(RESTART_RETRY), Fault::Restart { slot }));
                    }
                }
                Fault::Freeze { hold } => {
                    let Some((slot, caught)) = self.freeze_a_holder().await else {
                        self.tell("freeze: no replica up to freeze");
                        continue;
                    };
                    frozen = Some(slot);
                    let thaw = Fault::Thaw {
                        slot,
                        caught,
                        frozen_at: Instant::now(),
                    };
                    schedule.push((later(hold), thaw));
                }
                Fault::Thaw {
                    slot,
                    caught,
                    frozen_at,
                } => {
                    let taken = match &caught {
                        Some(claim) => self.taken_over(claim).await,
                        None => None,
                    };
                    let waited_enough = frozen_at.elapsed() > self.timing.recovery_bound();
                    if caught.is_some() && taken.is_none() && !waited_enough {
                        // Not taken over yet: stay frozen, so that the late commit meets a fence
                        // that has moved on.
                        let thaw = Fault::Thaw {
                            slot,
                            caught,
                            frozen_at,
                        };
                        schedule.push((later(Duration::from_millis(250)), thaw));
                        continue;
                    }
                    self.fleet.replica(slot).thaw();
                    self.last_fault = Instant::now();
                    frozen = None;
                    self.tell_thawed(slot, caught.as_ref(), taken, frozen_at);
                }
                Fault::DatabaseDown { down_for } => {
                    self.cluster.stop_immediately().await;
                    self.crashes.push(jiff::Timestamp::now().as_microsecond());
                    database_down = true;
                    let up = Fault::DatabaseUp {
                        down_at: Instant::now(),
                    };
                    schedule.push((later(down_for), up));
                    self.tell(&format!(
                        "PostgreSQL stopped (immediate shutdown), for {down_for:?}"
                    ));
                }
                Fault::DatabaseUp { down_at } => {
                    self.cluster.start_again().await;
                    self.last_fault = Instant::now();
                    database_down = false;
                    self.tell(&format!(
                        "PostgreSQL accepting connections again, {:.2} s after it stopped",
                        down_at.elapsed().as_secs_f64()
                    ));
                    let ready = self.wait_until_every_replica_is_ready().await;
                    self.tell(&format!(
                        "every replica up is ready again (its store accepts a commit), {:.2} s \
                         after PostgreSQL came back",
                        ready.as_secs_f64()
                    ));
                }
            }
        }
    }

    /// A replica that is up, neither frozen nor cut off already, for a network fault.
    fn network_victim(&mut self, frozen: Option<usize>, cut_off: Option<usize>) -> Option<usize> {
        let up: Vec<usize> = (self.up_slots(frozen).into_iter())
            .filter(|slot| Some(*slot) != cut_off)
            .collect();
        let victim = self.rng.pick(&up).copied();
        if victim.is_none() {
            self.tell("network fault: no replica up to fault");
        }
        victim
    }

    /// The slots whose process is up, but for `frozen`.
    fn up_slots(&self, frozen: Option<usize>) -> Vec<usize> {
        (0..self.fleet.size())
            .filter(|slot| self.fleet.is_up(*slot) && frozen != Some(*slot))
            .collect()
    }

    /// SIGKILLs one of `candidates` — the first caught holding a claim in `tries` brief freezes
    /// taken in turn, else the first — and watches the claims it died holding until they are
    /// cleared. Returns the slot killed.
    async fn kill_a_holder(&mut self, candidates: &[usize], tries: u32) -> usize {
        let mut victim = (candidates[0], Vec::new());
        for attempt in 0..tries as usize {
            let slot = candidates[attempt % candidates.len()];
            let held = self.frozen_holding(slot, Hold::Any).await;
            if !held.is_empty() {
                victim = (slot, held);
                break;
            }
            tokio::time::sleep(FREEZE_PAUSE).await;
        }
        let (slot, held) = victim;
        let id = self.fleet.replica_id(slot);
        self.fleet.kill(slot);
        let killed_at = Instant::now();
        self.last_fault = killed_at;
        self.tell(&format!("SIGKILL {id} holding {} claim(s)", held.len()));
        if !held.is_empty() {
            let admin = self.cluster.admin_url().to_owned();
            // A dead holder's claims lapse after the claim timeout and the next sweep clears
            // them; a database restart meanwhile delays, never strands, that.
            let bound = self.timing.recovery_bound() + DATABASE_DOWN_FOR.1;
            self.sweeps.push(tokio::spawn(async move {
                let cleared = cleared_within(&admin, &claims_of(&id), killed_at, bound).await;
                (id, held.len(), cleared)
            }));
        }
        slot
    }

    /// Freezes replicas briefly, one after another, until one is caught between a claim and its
    /// commit — holding a claim that will lapse, be swept and be taken by another replica while
    /// the holder lives — and leaves that one frozen. A replica that elects leaders dispatches
    /// deliveries only while it leads, so every replica gets its turn. If none is caught within
    /// [`FREEZE_TRIES`], a replica that is up stays frozen anyway: still a slow, not dead, owner.
    async fn freeze_a_holder(&mut self) -> Option<(usize, Option<Claim>)> {
        let up = self.up_slots(None);
        for attempt in 0..FREEZE_TRIES as usize {
            let slot = *up.get(attempt % up.len().max(1))?;
            let held = self.frozen_holding(slot, Hold::Lapsable).await;
            if let Some(claim) = held.into_iter().next() {
                self.tell(&format!(
                    "SIGSTOP {} between its claim on {} (fence {}) and its commit",
                    self.fleet.replica_id(slot),
                    claim.instance,
                    claim.fence
                ));
                return Some((slot, Some(claim)));
            }
            tokio::time::sleep(FREEZE_PAUSE).await;
        }
        let slot = *up.first()?;
        self.fleet.replica(slot).freeze();
        self.tell(&format!(
            "SIGSTOP {} (not caught holding a claim)",
            self.fleet.replica_id(slot)
        ));
        Some((slot, None))
    }

    /// Freezes `slot` and reads the claims it holds (`hold` says which count): if it holds any,
    /// it stays frozen; otherwise it is thawed at once, having lost a few milliseconds.
    async fn frozen_holding(&self, slot: usize, hold: Hold) -> Vec<Claim> {
        let replica = self.fleet.replica(slot);
        replica.freeze();
        let held: Option<String> = postgres::scalar(
            self.cluster.admin_url(),
            &hold.sql(&self.fleet.replica_id(slot)),
        )
        .await
        .expect("the database answers while it is up");
        let claims: Vec<Claim> = held
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|claim| {
                let (instance, fence) = claim.split_once('@')?;
                Some(Claim {
                    instance: instance.to_owned(),
                    fence: fence.parse().ok()?,
                })
            })
            .collect();
        if claims.is_empty() {
            replica.thaw();
        }
        claims
    }

    /// The instance's fence now, if another claim has taken it since `claim`.
    async fn taken_over(&self, claim: &Claim) -> Option<i64> {
        let sql = format!(
            "SELECT fence FROM instances WHERE id = '{}'",
            claim.instance
        );
        let fence: i64 = postgres::scalar(self.cluster.admin_url(), &sql)
            .await
            .expect("the database answers while it is up");
        (fence > claim.fence).then_some(fence)
    }

    fn tell_thawed(
        &self,
        slot: usize,
        caught: Option<&Claim>,
        taken: Option<i64>,
        frozen_at: Instant,
    ) {
        let id = self.fleet.replica_id(slot);
        let frozen_for = frozen_at.elapsed().as_secs_f64();
        match (caught, taken) {
            (Some(claim), Some(fence)) => self.tell(&format!(
                "SIGCONT {id} after {frozen_for:.2} s; meanwhile its claim on {} lapsed and \
                 another replica took the instance (fence {} → {fence}), so the commit it \
                 resumes with must land nothing",
                claim.instance, claim.fence
            )),
            _ => self.tell(&format!(
                "SIGCONT {id} after {frozen_for:.2} s; no claim of it was taken over meanwhile"
            )),
        }
    }

    /// Every replica that is up answers `/readyz` with 200: its pool reconnected. Fails the test
    /// if one does not within the recovery bound.
    async fn wait_until_every_replica_is_ready(&self) -> Duration {
        let since = Instant::now();
        for slot in self.up_slots(None) {
            loop {
                let (status, body) = self.fleet.replica(slot).get("/readyz").await;
                if status == 200 {
                    break;
                }
                assert!(
                    since.elapsed() < self.timing.recovery_bound(),
                    "{} is not ready again after the database came back: {body}",
                    self.fleet.replica_id(slot)
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        since.elapsed()
    }
}

/// Lets the nemesis read which instance rows a session holds locked: a lane's claim.
async fn read_row_locks(admin: &str) {
    use sqlx::Connection;
    let mut connection = sqlx::PgConnection::connect(admin)
        .await
        .expect("the test's cluster accepts its administrator");
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pgrowlocks")
        .execute(&mut connection)
        .await
        .expect("pgrowlocks ships with PostgreSQL");
}

/// Which of a replica's claims to catch it holding.
#[derive(Debug, Clone, Copy)]
enum Hold {
    /// Any: a kill then leaves it for the sweep, whatever the step was doing.
    Any,
    /// Only claims that lapse while the holder lives: a lane's, which PostgreSQL ends with the
    /// frozen holder's idle session, and an administrative one no commit in flight has locked
    /// yet (a commit holds its instance's row until it lands, so nobody could take that claim
    /// meanwhile).
    Lapsable,
}

impl Hold {
    /// The claims of replica `id`, as `instance@fence` separated by spaces, or NULL.
    fn sql(self, id: &str) -> String {
        self.held(id, "string_agg(id || '@' || fence, ' ')")
    }

    /// `what` (an aggregate) over the claims of replica `id`: owner columns naming it (its
    /// admin's claims), and instance rows its sessions hold locked (its lanes').
    fn held(self, id: &str, what: &str) -> String {
        let locking = match self {
            Hold::Any => "",
            Hold::Lapsable => "FOR UPDATE SKIP LOCKED",
        };
        format!(
            "WITH owned AS (SELECT id, fence FROM instances WHERE owner LIKE '{id}/%' {locking}), \
             locked AS (SELECT i.id, i.fence FROM instances AS i \
               JOIN pgrowlocks('instances') AS l ON i.ctid = l.locked_row \
               JOIN pg_stat_activity AS a ON a.pid = ANY (l.pids) \
               WHERE a.application_name = '{id}') \
             SELECT {what} FROM (SELECT * FROM owned UNION SELECT * FROM locked) AS held"
        )
    }
}

/// Counts the claims replica `id` holds.
fn claims_of(id: &str) -> String {
    Hold::Any.held(id, "count(*)")
}

/// How long after `since` the count `sql` reached zero, looking until `bound` has passed;
/// `None` if it never did. While the database is away the count fails, and is asked again.
async fn cleared_within(
    admin: &str,
    sql: &str,
    since: Instant,
    bound: Duration,
) -> Option<Duration> {
    while since.elapsed() < bound {
        if postgres::scalar::<i64>(admin, sql)
            .await
            .is_ok_and(|n| n == 0)
        {
            return Some(since.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// SplitMix64: a seeded generator small enough to read, so that a seed replays a schedule.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// In [0, 1).
    fn fraction(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn between(&mut self, (low, high): (Duration, Duration)) -> Duration {
        low + (high - low).mul_f64(self.fraction())
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        if items.is_empty() {
            return None;
        }
        items.get((self.next() % items.len() as u64) as usize)
    }
}
