//! The money-transfer workload that `replicas.rs` and `chaos.rs` share: a fleet of `sutra serve`
//! replicas over one PostgreSQL database, a worker polling each replica, senders spreading
//! transfers over all of them, and the invariants every run must leave behind.
//!
//! A transfer is `start → debit task → credit task → emit to the ledger → end`: two trips through
//! the pull surface, one through the outbox, and every step after the first a resume under the
//! claim, which is where replicas compete.

// Each test binary uses a different part of this module.
#![allow(dead_code)]

pub mod composition;
pub mod history;
pub mod incarnations;
pub mod shop;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sutra_client::{Client, Task, Worker};
use sutra_testkit::proxy::Proxy;
use sutra_testkit::{
    Receiver, Server, ServerOptions, assert_audit_sequence_is_whole, postgres, serve,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The deployment: transfers start on `transfers`, and each ends by telling the ledger at
/// `ledger_url`. The tasks' retry budget is far above what any run spends: under chaos a task
/// whose worker's answer was lost to a killed replica costs an attempt when its lock expires,
/// and a run must not fail an instance because the nemesis struck one task four times.
pub fn transfers(ledger_url: &str) -> String {
    format!(
        r#"
name: bank
channels:
  transfers:
    transport: http
    correlate: data.id
  ledger:
    transport: http
    url: "{ledger_url}"
flows:
  transfer:
    start: {{ channel: transfers }}
    nodes:
      - id: debit
        task: {{ topic: debit-account, input: {{ account: "= vars.input.from", amount: "= vars.input.amount" }}, retries: 50, backoff: PT0.1S }}
        output: debit
      - id: credit
        task: {{ topic: credit-account, input: {{ account: "= vars.input.to", amount: "= vars.input.amount" }}, retries: 50, backoff: PT0.1S }}
        output: credit
      - id: notify
        emit: {{ channel: ledger, data: {{ transfer: "= vars.input.id", amount: "= vars.input.amount" }}, key: vars.input.id }}
      - id: done
        end: {{}}
"#
    )
}

/// The nodes whose tasks every transfer completes, once each.
const TASK_NODES: [&str; 2] = ["debit", "credit"];

/// Timeouts shortened from the production defaults so that a dead or frozen holder is recovered
/// from in seconds. The claim timeout still far exceeds a healthy step (milliseconds).
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    pub claim_timeout: Duration,
    pub sweep_interval: Duration,
    pub lease_ttl: Duration,
    pub lease_poll: Duration,
    /// How long a worker's task lock lasts: a task whose worker vanished (or whose poll answer
    /// died with its replica) is handed out again after this.
    pub task_lock: Duration,
}

impl Timing {
    pub const SHORT: Timing = Timing {
        claim_timeout: Duration::from_secs(2),
        sweep_interval: Duration::from_millis(500),
        lease_ttl: Duration::from_secs(2),
        lease_poll: Duration::from_millis(500),
        task_lock: Duration::from_secs(2),
    };

    /// A replica's environment for these timings. Leases are short too: only the `timers`
    /// leader dispatches task completions, so a dead leader's lease must run out in seconds.
    fn apply(&self, options: ServerOptions) -> ServerOptions {
        options
            .claim_timeout(self.claim_timeout)
            .sweep_interval(self.sweep_interval)
            .leases(self.lease_ttl, self.lease_poll)
            .env("SUTRA_OUTBOX_BACKOFF", "PT0.1S")
            .env("SUTRA_SCHEDULES_POLL", "PT0.2S")
    }

    /// How long after its last fault a fleet has to finish everything left: a dead holder's
    /// claim lapses and is swept, a refused delivery looks again within a claim timeout, a lost
    /// task lock expires, a dead leader's lease runs out and is taken at a poll — plus generous
    /// slack, so that a slow machine makes the test slower, never red.
    pub fn recovery_bound(&self) -> Duration {
        2 * self.claim_timeout
            + self.sweep_interval
            + self.task_lock
            + self.lease_ttl
            + self.lease_poll
            + Duration::from_secs(30)
    }

    /// How long after its last fault every lease role must be held by one live replica again:
    /// a dead holder's lease runs out, and another replica takes it at its next poll — plus
    /// slack for a slow machine's scheduling and round trips.
    pub fn lease_bound(&self) -> Duration {
        self.lease_ttl + self.lease_poll + Duration::from_secs(10)
    }
}

/// One replica position of a fleet: a fixed address, and the process serving it now, if any.
struct Slot {
    listen: String,
    url: String,
    /// The database URL its replicas use: through its own proxy, when the fleet has them.
    datasource: String,
    proxy: Option<Proxy>,
    /// How many processes this slot has had; each gets its own replica id (decision 0008: a
    /// restarted replica must not re-enter its predecessor's claims).
    incarnation: u32,
    server: Option<Server>,
}

/// How to start a [`Fleet`]: [`Fleet::of`], then what a test needs besides.
pub struct FleetOptions {
    name: String,
    size: usize,
    timing: Timing,
    switches: Vec<String>,
    proxied: bool,
    lanes: usize,
}

impl FleetOptions {
    /// Every replica runs `lanes` engine lanes (`sutra.engine.lanes`; 1 unless told).
    pub fn lanes(mut self, lanes: usize) -> FleetOptions {
        self.lanes = lanes;
        self
    }

    /// Every replica with the test build's `switches` on ([`ServerOptions::switches`]).
    pub fn switches(mut self, switches: &[&str]) -> FleetOptions {
        let switches = switches.iter().map(|switch| (*switch).to_owned());
        self.switches.extend(switches);
        self
    }

    /// Each slot's replicas reach the database through a loopback proxy of the slot's own
    /// ([`Fleet::proxy`]): a network fault can cut one replica off, or slow it.
    pub fn proxied(mut self) -> FleetOptions {
        self.proxied = true;
        self
    }

    /// Starts the replicas on `datasource`. The first deploys `deployment` before the others
    /// start, so that every replica serves it whether or not replicas learn of each other's
    /// deployments. Every replica records its history log (decision 0043) on stderr, which
    /// [`Fleet::histories`] collects.
    pub async fn start(self, datasource: &str, deployment: &str) -> Fleet {
        let options = self
            .timing
            .apply(serve!(datasource))
            .env("SUTRA_LOG", history::LOG_FILTER)
            .lanes(self.lanes)
            .switches(&self.switches);
        let mut fleet = Fleet {
            options,
            name: self.name,
            slots: Vec::new(),
            retired: Vec::new(),
        };
        for slot in 0..self.size {
            let (proxy, datasource) = if self.proxied {
                let (proxy, url) = Proxy::in_front_of(datasource);
                (Some(proxy), url)
            } else {
                (None, datasource.to_owned())
            };
            let options = fleet.options_for(slot, 0, "127.0.0.1:0", &datasource);
            let server = Server::start(&options);
            let listen = server.listen_address().to_owned();
            fleet.slots.push(Slot {
                url: server.url(""),
                listen,
                datasource,
                proxy,
                incarnation: 0,
                server: Some(server),
            });
            if slot == 0 {
                fleet.replica(0).deploy_accepted(deployment).await;
            }
        }
        fleet
    }
}

/// `sutra serve` replicas on one database, each keeping its address across restarts so that the
/// workers and senders aimed at it reach its successor. Dropping the fleet kills every process.
pub struct Fleet {
    options: ServerOptions,
    name: String,
    slots: Vec<Slot>,
    /// Every incarnation killed, with its id: kept for its history log.
    retired: Vec<(String, Server)>,
}

impl Fleet {
    /// A fleet of `size` replicas named `{name}-r{slot}-i{incarnation}`, on `timing`; see
    /// [`FleetOptions`] for the rest.
    pub fn of(name: &str, size: usize, timing: Timing) -> FleetOptions {
        FleetOptions {
            name: name.to_owned(),
            size,
            timing,
            switches: Vec::new(),
            proxied: false,
            lanes: 1,
        }
    }

    /// Each incarnation's id, which also names its database sessions (`application_name`, set
    /// through libpq's `PGAPPNAME`): a nemesis can tell which transactions are whose.
    fn options_for(
        &self,
        slot: usize,
        incarnation: u32,
        listen: &str,
        datasource: &str,
    ) -> ServerOptions {
        let id = format!("{}-r{slot}-i{incarnation}", self.name);
        let mut options = self.options.clone();
        datasource.clone_into(&mut options.datasource);
        options.replica(&id).env("PGAPPNAME", &id).listen(listen)
    }

    /// The proxy between `slot`'s replicas and the database. Panics unless the fleet was
    /// started [`FleetOptions::proxied`].
    pub fn proxy(&self, slot: usize) -> &Proxy {
        self.slots[slot]
            .proxy
            .as_ref()
            .expect("a fleet started with proxies")
    }

    pub fn size(&self) -> usize {
        self.slots.len()
    }

    /// Every slot's base URL, stable across restarts.
    pub fn urls(&self) -> Vec<String> {
        self.slots.iter().map(|slot| slot.url.clone()).collect()
    }

    /// The process serving `slot`. Panics if it is down.
    pub fn replica(&self, slot: usize) -> &Server {
        self.slots[slot]
            .server
            .as_ref()
            .unwrap_or_else(|| panic!("replica {slot} is down"))
    }

    pub fn is_up(&self, slot: usize) -> bool {
        self.slots[slot].server.is_some()
    }

    /// The replica id of the process serving `slot` now.
    pub fn replica_id(&self, slot: usize) -> String {
        format!("{}-r{slot}-i{}", self.name, self.slots[slot].incarnation)
    }

    /// SIGKILL: the slot's process dies holding whatever it held.
    pub fn kill(&mut self, slot: usize) {
        let id = self.replica_id(slot);
        if let Some(mut server) = self.slots[slot].server.take() {
            server.kill();
            self.retired.push((id, server));
        }
    }

    /// The ids of the incarnations killed so far.
    pub fn killed(&self) -> Vec<String> {
        self.retired.iter().map(|(id, _)| id.clone()).collect()
    }

    /// Every incarnation's stderr once it holds at least `answers` answered messages and `sent`
    /// outbox rows sent: a replica writes an answer's event before its caller hears the answer,
    /// and a send's once the receiver took it, but the thread that reads the replica's stderr
    /// may not have read it yet when the test asks (bounded, 10 s: a killed replica may never
    /// write what it did last).
    pub fn histories_settled(&self, answers: usize, sent: usize) -> Vec<history::Incarnation> {
        self.histories_holding(&[("answered", answers), ("sent", sent)])
    }

    /// Every incarnation's stderr once it holds at least so many events of each kind named
    /// (bounded, 10 s), for the same reason as [`Fleet::histories_settled`].
    pub fn histories_holding(&self, wanted: &[(&str, usize)]) -> Vec<history::Incarnation> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let histories = self.histories();
            let count = |event: &str| {
                let line = format!(r#""ev":"{event}""#);
                histories
                    .iter()
                    .map(|history| history.stderr.matches(&line).count())
                    .sum::<usize>()
            };
            let settled = wanted
                .iter()
                .all(|&(event, at_least)| count(event) >= at_least);
            if settled || Instant::now() >= deadline {
                return histories;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Every incarnation's stderr so far, killed or up, with its replica id: what the history
    /// checker reads.
    pub fn histories(&self) -> Vec<history::Incarnation> {
        let live = (0..self.size())
            .filter(|slot| self.is_up(*slot))
            .map(|slot| (self.replica_id(slot), self.replica(slot)));
        let killed = self.retired.iter().map(|(id, server)| (id.clone(), server));
        killed
            .chain(live)
            .map(|(replica, server)| history::Incarnation {
                replica,
                stderr: server.stderr_text(),
            })
            .collect()
    }

    /// Starts a new incarnation on the slot's address. `Err` when it exited instead of
    /// listening, as a replica does when its database is away: the caller tries again.
    pub fn restart(&mut self, slot: usize) -> Result<(), String> {
        assert!(!self.is_up(slot), "replica {slot} is still up");
        let incarnation = self.slots[slot].incarnation + 1;
        let Slot {
            listen, datasource, ..
        } = &self.slots[slot];
        let options = self.options_for(slot, incarnation, listen, datasource);
        // A failed start used the incarnation's id too: the next attempt takes a fresh one.
        self.slots[slot].incarnation = incarnation;
        let server = tokio::task::block_in_place(|| Server::try_start(&options))?;
        self.slots[slot].server = Some(server);
        Ok(())
    }
}

/// What the ledger handlers read from a task's input, and give back as its output.
#[derive(Debug, Serialize, Deserialize)]
struct Posting {
    account: String,
    amount: u64,
}

/// One worker per replica, each polling only its own replica, running until stopped.
pub struct Workers {
    running: Vec<(oneshot::Sender<()>, JoinHandle<()>)>,
    runs: Arc<AtomicU64>,
}

impl Workers {
    /// Workers with short polls and `timing`'s task lock, so that a task whose answer was lost
    /// comes back quickly. A worker whose replica is away backs off and polls again on its own.
    pub fn start(urls: &[String], timing: Timing) -> Workers {
        let runs = Arc::new(AtomicU64::new(0));
        let running = urls
            .iter()
            .enumerate()
            .map(|(n, url)| {
                let worker = ledger(url, &format!("ledger-{n}"), &runs)
                    .lock(timing.task_lock)
                    .poll_wait(Duration::from_secs(1));
                let (stop, stopped) = oneshot::channel();
                let done = tokio::spawn(worker.run(async {
                    let _ = stopped.await;
                }));
                (stop, done)
            })
            .collect();
        Workers { running, runs }
    }

    /// How many times a handler ran: two per transfer, plus every task run again because its
    /// first run's completion was lost (at least once, as SPEC §5.5 promises).
    pub fn handler_runs(&self) -> u64 {
        self.runs.load(Ordering::Relaxed)
    }

    pub async fn stop(self) {
        for (stop, done) in self.running {
            let _ = stop.send(());
            tokio::time::timeout(sutra_testkit::PATIENCE, done)
                .await
                .expect("a worker stops when asked")
                .expect("a worker does not panic");
        }
    }
}

fn ledger(url: &str, id: &str, runs: &Arc<AtomicU64>) -> Worker {
    let client = Client::new(url).expect("a replica's URL");
    let posting = |runs: Arc<AtomicU64>| {
        move |task: Task<Posting>| {
            runs.fetch_add(1, Ordering::Relaxed);
            async move { Ok(task.input) }
        }
    };
    Worker::new(client, id)
        .handler("debit-account", posting(Arc::clone(runs)))
        .handler("credit-account", posting(Arc::clone(runs)))
        .handler("reserve-stock", shop::echo)
        .handler("unreserve-stock", shop::echo)
        .handler("pack-box", shop::echo)
}

/// How long one send may take before the sender gives up on that replica and tries the next:
/// a frozen replica never answers.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a sender keeps trying one event before the test fails.
const SEND_PATIENCE: Duration = Duration::from_secs(120);

/// A transfer as its start event, and how it was accepted.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub event_id: String,
    pub transfer: String,
    pub instance: String,
    pub dedup: bool,
    /// The slot that accepted it.
    pub slot: usize,
    /// Sends it took: one, unless replicas refused, failed or vanished.
    pub attempts: u32,
}

/// Sends transfer `transfer` (event id `evt-{transfer}`) until a replica accepts it, starting
/// with slot `first` and moving round-robin to the next slot after any failure. Every retry
/// carries the same event id, so however many sends it takes, the event is consumed once.
pub async fn send_transfer(
    http: &reqwest::Client,
    urls: &[String],
    first: usize,
    transfer: &str,
) -> Accepted {
    send_until_accepted(
        http,
        urls,
        first,
        "transfers",
        transfer,
        transfer_data(transfer),
    )
    .await
}

/// A transfer's start event's data.
fn transfer_data(transfer: &str) -> Value {
    json!({"id": transfer, "from": "alice", "to": "bob", "amount": 10})
}

/// Sends the start of `id` (event id `evt-{id}`, carrying `data`) on `channel` as
/// [`send_transfer`] does a transfer's.
pub async fn send_until_accepted(
    http: &reqwest::Client,
    urls: &[String],
    first: usize,
    channel: &str,
    id: &str,
    data: Value,
) -> Accepted {
    let (event_id, transfer) = (format!("evt-{id}"), id);
    let body = sutra_testkit::event(&event_id, data).to_string();
    let deadline = Instant::now() + SEND_PATIENCE;
    let mut attempts = 0;
    loop {
        let slot = (first + attempts as usize) % urls.len();
        attempts += 1;
        let sent = http
            .post(format!("{}/v1/channels/{channel}/messages", urls[slot]))
            .header("content-type", "application/cloudevents+json")
            .body(body.clone())
            .timeout(SEND_TIMEOUT)
            .send()
            .await;
        if let Ok(response) = sent {
            let status = response.status().as_u16();
            let answer: Value = response.json().await.unwrap_or(Value::Null);
            if status == 202 {
                return Accepted {
                    event_id,
                    transfer: transfer.to_owned(),
                    instance: instance_of(&answer),
                    dedup: answer["dedup"] == true,
                    slot,
                    attempts,
                };
            }
            // Anything but a retry-safe refusal or an unavailable store is a bug, not chaos.
            assert!(
                status == 409 || status >= 500,
                "{event_id} was refused by replica {slot}: {status} {answer}"
            );
        }
        assert!(
            Instant::now() < deadline,
            "{event_id} was not accepted by any replica within {SEND_PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Starts one sender per transfer over `window`, transfer `n` at `n / per_second` into it and
/// first to replica `n mod replicas`; each sends until accepted.
pub fn send_paced(
    http: &reqwest::Client,
    urls: &[String],
    window: Duration,
    per_second: f64,
) -> Vec<JoinHandle<Accepted>> {
    let transfers = Paced {
        channel: "transfers",
        prefix: "c",
        data: transfer_data,
    };
    transfers.send(http, urls, window, per_second)
}

/// Starts sent at a steady pace on one channel: start `n` is `{prefix}{n}`, with the data `data`
/// makes of that id.
pub struct Paced {
    pub channel: &'static str,
    pub prefix: &'static str,
    pub data: fn(&str) -> Value,
}

impl Paced {
    /// One sender per start over `window`, start `n` at `n / per_second` into it and first to
    /// replica `n mod replicas`; each sends until accepted.
    pub fn send(
        self,
        http: &reqwest::Client,
        urls: &[String],
        window: Duration,
        per_second: f64,
    ) -> Vec<JoinHandle<Accepted>> {
        let count = (window.as_secs_f64() * per_second) as usize;
        (0..count)
            .map(|n| {
                let (http, urls) = (http.clone(), urls.to_vec());
                let at = Duration::from_secs_f64(n as f64 / per_second);
                let Paced {
                    channel,
                    prefix,
                    data,
                } = self;
                tokio::spawn(async move {
                    tokio::time::sleep(at).await;
                    let id = format!("{prefix}{n}");
                    let first = n % urls.len();
                    send_until_accepted(&http, &urls, first, channel, &id, data(&id)).await
                })
            })
            .collect()
    }
}

fn instance_of(answer: &Value) -> String {
    answer["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("no instance in {answer}"))
        .to_owned()
}

/// Distinct idempotency keys the receiver has seen.
fn distinct_keys(receiver: &Receiver) -> HashSet<String> {
    receiver
        .received()
        .into_iter()
        .filter_map(|request| request.idempotency_key)
        .collect()
}

/// Waits until the ledger has heard of `count` transfers — each emits in its final step, so
/// then every instance has completed — and returns how long that took from `since`. Fails the
/// test, listing every unfinished instance, if that takes longer than `within`.
pub async fn wait_for_ledger(
    receiver: &Receiver,
    count: usize,
    since: Instant,
    within: Duration,
    server: &Server,
) -> Duration {
    loop {
        if distinct_keys(receiver).len() >= count {
            return since.elapsed();
        }
        if since.elapsed() > within {
            let unfinished: Vec<Value> = instances(server)
                .await
                .into_iter()
                .filter(|instance| instance["status"] != "completed")
                .collect();
            panic!(
                "the ledger heard of {} of {count} transfers within {within:?}; unfinished: \
                 {unfinished:#?}",
                distinct_keys(receiver).len()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every instance, whole (with its variables), following the keyset pages.
async fn instances(server: &Server) -> Vec<Value> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let (status, page) = server
            .get(&format!("/v1/instances?vars=true&limit=500{after}"))
            .await;
        assert_eq!(status, 200, "{page}");
        all.extend(page["items"].as_array().cloned().unwrap_or_default());
        match page["next"].as_str() {
            Some(next) => after = format!("&after={next}"),
            None => return all,
        }
    }
}

/// What the invariants found, for the report.
#[derive(Debug)]
pub struct Audit {
    /// Requests the ledger got beyond one per message: resends of a key, which its idempotency
    /// key lets the ledger ignore.
    pub ledger_duplicates: usize,
}

/// The invariants of a finished run, in the brief's words:
/// - every accepted event was consumed exactly once: one instance per event id, and no other;
/// - no instance advanced twice: each audit sequence is whole (1..n, no gap, no duplicate), and
///   each task park's completion is in the history once;
/// - every instance completed, and its one outbox row was sent and reached the ledger, which
///   heard no key that no instance emitted.
pub async fn audit(server: &Server, accepted: &[Accepted], receiver: &Receiver) -> Audit {
    let by_id: HashMap<String, Value> = instances(server)
        .await
        .into_iter()
        .filter(|instance| instance["flow"] == "transfer")
        .map(|instance| (instance["id"].as_str().unwrap().to_owned(), instance))
        .collect();
    assert_eq!(
        by_id.len(),
        accepted.len(),
        "one transfer per accepted event, and no other"
    );
    let mut emitted = HashSet::new();
    for sent in accepted {
        // A duplicate answer to an event's first send: it was consumed before it was sent.
        assert!(
            !sent.dedup || sent.attempts > 1,
            "{} was a duplicate at its first send",
            sent.event_id
        );
        let instance = by_id
            .get(&sent.instance)
            .unwrap_or_else(|| panic!("{} was answered with a missing instance", sent.event_id));
        assert_eq!(
            (&instance["status"], &instance["vars"]["input"]["id"]),
            (&json!("completed"), &json!(sent.transfer)),
            "{instance}"
        );
        assert_advanced_once(server, &sent.instance).await;
        emitted.insert(sent_outbox_key(server, &sent.instance).await);
    }
    assert_eq!(emitted.len(), accepted.len(), "one outbox key per instance");
    let received = heard(receiver);
    let heard: HashSet<String> = received.iter().cloned().collect();
    let unknown: Vec<&String> = heard.difference(&emitted).collect();
    let missing: Vec<&String> = emitted.difference(&heard).collect();
    assert!(
        unknown.is_empty() && missing.is_empty(),
        "the ledger heard keys no instance emitted: {unknown:?}; it never heard: {missing:?}"
    );
    Audit {
        ledger_duplicates: received.len() - heard.len(),
    }
}

/// The idempotency key of every request the receiver heard, repeats included.
pub fn heard(receiver: &Receiver) -> Vec<String> {
    (receiver.received().iter())
        .map(|request| request.idempotency_key.clone().expect("an idempotency key"))
        .collect()
}

/// How many different keys were heard: a row sent again is one send the history must show.
pub fn distinct(heard: &[String]) -> usize {
    heard.iter().collect::<HashSet<_>>().len()
}

/// The history of a transfer: a whole audit sequence, and each event of the flow exactly once.
async fn assert_advanced_once(server: &Server, instance: &str) {
    let history = server.history(instance).await;
    assert_audit_sequence_is_whole(&history);
    let count = |kind: &str, node: Option<&str>| {
        history
            .iter()
            .filter(|event| event["kind"] == kind && node.is_none_or(|node| event["node"] == node))
            .count()
    };
    for node in TASK_NODES {
        assert_eq!(
            count("task_completed", Some(node)),
            1,
            "{instance}: the {node} task's completion is not in the history once: {history:#?}"
        );
    }
    for kind in ["started", "emitted", "completed"] {
        assert_eq!(
            count(kind, None),
            1,
            "{instance}: not once {kind}: {history:#?}"
        );
    }
}

/// The key of the instance's one outbox row, which must have been sent.
async fn sent_outbox_key(server: &Server, instance: &str) -> String {
    let rows = server.outbox(instance).await;
    let [row] = rows.as_slice() else {
        panic!("{instance}: one outbox row: {rows:#?}");
    };
    assert_eq!(row["state"], "sent", "{instance}: {row}");
    row["idempotency_key"].as_str().unwrap().to_owned()
}

/// Resends every accepted event, each to a replica other than the one that accepted it: each
/// must be answered as a duplicate naming the instance the first answer named.
pub async fn assert_resends_are_duplicates(
    http: &reqwest::Client,
    urls: &[String],
    accepted: &[Accepted],
) {
    for sent in accepted {
        let again = send_transfer(http, urls, sent.slot + 1, &sent.transfer).await;
        assert_eq!(
            (again.dedup, again.instance.as_str()),
            (true, sent.instance.as_str()),
            "{} resent to replica {}",
            sent.event_id,
            again.slot
        );
    }
}

/// What the API does not show, read past row-level security: no claim is still held, no
/// delivery was left asked and not taken, no task waits for a worker, no outbox row is unsent.
pub async fn assert_nothing_stranded(admin_url: &str) {
    for (what, sql) in [
        (
            "claims still held",
            "SELECT count(*) FROM instances WHERE owner IS NOT NULL",
        ),
        ("deliveries never taken", "SELECT count(*) FROM deliveries"),
        (
            "tasks still open",
            "SELECT count(*) FROM tasks WHERE state IN ('available', 'locked')",
        ),
        (
            "outbox rows unsent",
            "SELECT count(*) FROM outbox WHERE sent_at IS NULL",
        ),
    ] {
        let count: i64 = postgres::scalar(admin_url, sql)
            .await
            .unwrap_or_else(|e| panic!("cannot count {what}: {e}"));
        assert_eq!(count, 0, "{what}");
    }
}

/// The roles every fleet elects a leader for (SPEC §6); channel roles exist only for singleton
/// channels, which this workload has none of.
const ROLES: [&str; 5] = [
    "timers",
    "instance-sweeper",
    "history-purger",
    "retirement-gate",
    "scheduler",
];

/// Whether the lease check ran.
#[derive(Debug, PartialEq, Eq)]
pub enum LeaseCheck {
    /// Each role was held by one live replica this long after the moment checked from.
    Held(Duration),
    /// `GET /v1/leases` is not served by this build; nothing was checked.
    NotServed,
}

impl std::fmt::Display for LeaseCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LeaseCheck::Held(_) => write!(f, "each held by one live replica"),
            LeaseCheck::NotServed => write!(f, "not served (unchecked)"),
        }
    }
}

/// One replica's `GET /v1/leases`: the fleet's lease rows, and the roles it says it leads.
struct LeaseView {
    replica: String,
    rows: Vec<Value>,
    leading: Vec<String>,
}

/// Every lease role is held by exactly one live replica within `within` of `since` (ttl + poll
/// after the last fault, plus slack): one unexpired row per role, whose holder is a replica up
/// now — not a killed one, nor a predecessor incarnation of a live one — and which alone among
/// the live replicas says it leads the role.
pub async fn assert_every_role_led_by_one_live_replica(
    fleet: &Fleet,
    since: Instant,
    within: Duration,
) -> LeaseCheck {
    loop {
        let mut views = Vec::new();
        // A replica whose connections the last fault reset may answer a retryable 503 until its
        // pool reconnects: asked again, within `within`, like any other problem.
        let mut problems = Vec::new();
        for slot in (0..fleet.size()).filter(|slot| fleet.is_up(*slot)) {
            let (status, body) = fleet.replica(slot).get("/v1/leases").await;
            if status == 404 && body["code"] == "SUTRA.API.ROUTE.NOT_FOUND" {
                println!("leases: GET /v1/leases is not served; the lease invariant was skipped");
                return LeaseCheck::NotServed;
            }
            if status != 200 && body["retryable"] == true {
                problems.push(format!("{}: {body}", fleet.replica_id(slot)));
                continue;
            }
            assert_eq!(status, 200, "{body}");
            views.push(LeaseView {
                replica: fleet.replica_id(slot),
                rows: body["items"].as_array().cloned().unwrap_or_default(),
                leading: serde_json::from_value(body["leading"].clone()).unwrap_or_default(),
            });
        }
        problems.extend(lease_problems(&views));
        if problems.is_empty() {
            return LeaseCheck::Held(since.elapsed());
        }
        assert!(
            since.elapsed() < within,
            "lease roles not each held by one live replica within {within:?}: {problems:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What is wrong with the leases the live replicas show, if anything.
fn lease_problems(views: &[LeaseView]) -> Vec<String> {
    let live: Vec<&str> = views.iter().map(|view| view.replica.as_str()).collect();
    let now = jiff::Timestamp::now();
    let mut problems = Vec::new();
    for view in views {
        for role in ROLES {
            let rows: Vec<&Value> = view.rows.iter().filter(|row| row["role"] == role).collect();
            let [row] = rows.as_slice() else {
                problems.push(format!("{}: {} rows for {role}", view.replica, rows.len()));
                continue;
            };
            let holder = row["holder"].as_str().unwrap_or_default();
            let leaders: Vec<&str> = views
                .iter()
                .filter(|view| view.leading.iter().any(|led| led == role))
                .map(|view| view.replica.as_str())
                .collect();
            let expires = row["expires_at"]
                .as_str()
                .and_then(|at| at.parse::<jiff::Timestamp>().ok());
            if !live.contains(&holder) || leaders != [holder] {
                problems.push(format!(
                    "{role}: held by {holder:?}, led by {leaders:?} among {live:?}"
                ));
            } else if expires.is_none_or(|expires| expires <= now) {
                problems.push(format!("{role}: expired ({})", row["expires_at"]));
            }
        }
    }
    problems
}
