//! Leases, the history purger and deployment convergence end to end (SPEC §6, §7.1;
//! docs/decisions/0018): real `sutra serve` replicas over one PostgreSQL database — or one SQLite
//! file — killed with SIGKILL, stopped with SIGTERM, and watched over `GET /v1/leases`, where each
//! replica shows the fleet's lease rows and says which roles it leads itself.
//!
//! Every duration asserted is an upper bound with [`SLACK`] above what the design promises —
//! `ttl + poll` after a SIGKILL, one poll after a SIGTERM or a deploy — and each test prints what
//! it measured: a slow machine makes these tests slower, never red.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Scratch, Server, ServerOptions, serve, stdout_of, until};

/// Far above a healthy handover's scheduling, process start-up and HTTP round trips.
const SLACK: Duration = Duration::from_secs(10);

/// A deployment that declares a singleton channel, so that its role joins the fleet's, and ends
/// each transfer `completed` or `failed` as its message says.
const BANK: &str = r#"
name: bank
channels:
  transfers:
    transport: http
    correlate: data.id
  bank-replies:
    transport: amqp
    queue: bank.replies
    singleton: true
flows:
  transfer:
    start: { channel: transfers }
    nodes:
      - id: check
        choice:
          - when: vars.input.ok
            next: done
        otherwise: refused
      - id: done
        end: {}
      - id: refused
        fail: { code: TRANSFER.REFUSED, detail: "= 'refused ' + vars.input.id" }
"#;

/// Every role of a fleet running [`BANK`].
const ROLES: [&str; 6] = [
    "channel:default:bank-replies",
    "history-purger",
    "instance-sweeper",
    "retirement-gate",
    "scheduler",
    "timers",
];

/// How a replica holds leases: `(ttl, poll)`.
#[derive(Clone, Copy)]
struct Leases {
    ttl: Duration,
    poll: Duration,
}

impl Leases {
    /// A dead holder's roles are taken within seconds.
    const SHORT: Leases = Leases {
        ttl: Duration::from_secs(3),
        poll: Duration::from_millis(500),
    };
    /// Only a release explains a handover within seconds.
    const LONG_TTL: Leases = Leases {
        ttl: Duration::from_secs(30),
        poll: Duration::from_millis(500),
    };
    /// Only a notice explains a deployment converging within seconds.
    const LONG_POLL: Leases = Leases {
        ttl: Duration::from_secs(150),
        poll: Duration::from_secs(60),
    };
}

fn options(datasource: &str, id: &str, leases: Leases) -> ServerOptions {
    serve!(datasource)
        // `bank-replies` is an amqp channel: a deployment declaring it needs the broker's URL.
        .amqp()
        .replica(id)
        .leases(leases.ttl, leases.poll)
}

fn replica(database: &TestDatabase, id: &str, leases: Leases) -> Server {
    Server::start(&options(database.url(), id, leases))
}

/// What one replica answers on `GET /v1/leases`.
struct Seen {
    /// The holder of each role whose lease has not expired.
    held: BTreeMap<String, String>,
    replica: String,
    leading: Vec<String>,
}

async fn seen_by(server: &Server) -> Seen {
    let (status, body) = server.get("/v1/leases").await;
    assert_eq!(status, 200, "{body}");
    let now = jiff::Timestamp::now();
    let held = body["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|lease| {
            let expires: jiff::Timestamp = lease["expires_at"].as_str().unwrap().parse().unwrap();
            expires > now
        })
        .map(|lease| {
            let text = |field: &str| lease[field].as_str().unwrap().to_owned();
            (text("role"), text("holder"))
        })
        .collect();
    let leading = body["leading"]
        .as_array()
        .expect("leading")
        .iter()
        .map(|role| role.as_str().unwrap().to_owned())
        .collect();
    Seen {
        held,
        replica: body["replica"].as_str().unwrap().to_owned(),
        leading,
    }
}

/// Whether every role is held by a live lease whose holder, alone among `servers`, says it
/// leads the role; the holders, if so.
async fn one_leader_per_role(servers: &[&Server]) -> Option<BTreeMap<String, String>> {
    let mut seen = Vec::new();
    for server in servers {
        seen.push(seen_by(server).await);
    }
    let held = &seen[0].held;
    let agreed = ROLES.iter().all(|role| {
        let leaders: Vec<&str> = seen
            .iter()
            .filter(|view| view.leading.iter().any(|led| led == role))
            .map(|view| view.replica.as_str())
            .collect();
        held.get(*role)
            .is_some_and(|holder| leaders == [holder.as_str()])
    });
    agreed.then(|| held.clone())
}

/// Waits until every role has exactly one leader among `servers`; returns who holds what.
async fn until_one_leader_per_role(servers: &[&Server]) -> BTreeMap<String, String> {
    let mut holders = None;
    until("the roles have one leader each", async || {
        holders = one_leader_per_role(servers).await;
        holders.is_some()
    })
    .await;
    holders.unwrap()
}

/// Waits until `server` holds and leads every role; returns how long after `since` it did.
async fn until_it_leads_everything(server: &Server, since: Instant, within: Duration) -> Duration {
    loop {
        let seen = seen_by(server).await;
        let holds_all = ROLES.iter().all(|role| {
            seen.held.get(*role) == Some(&seen.replica) && seen.leading.iter().any(|r| r == role)
        });
        let elapsed = since.elapsed();
        if holds_all {
            return elapsed;
        }
        assert!(
            elapsed < within,
            "{} did not take every role within {within:?}: holds {:?}, leads {:?}",
            seen.replica,
            seen.held,
            seen.leading
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sends a transfer to `server` until the channel is live there; returns the accepted answer and
/// how long after `since` it came.
async fn until_accepted(server: &Server, event: &str, since: Instant) -> (Value, Duration) {
    loop {
        let (status, body) = server
            .send("transfers", event, json!({"id": event, "ok": true}))
            .await;
        let elapsed = since.elapsed();
        if status == 202 {
            return (body, elapsed);
        }
        assert_eq!(body["code"], "SUTRA.INTAKE.CHANNEL.UNKNOWN", "{body}");
        assert!(elapsed < sutra_testkit::PATIENCE, "never live: {body}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `sutra leases` against `server`, with `flags`; its stdout.
fn sutra_leases(server: &Server, flags: &[&str]) -> String {
    stdout_of(
        std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
            .args(["leases", "--server", &server.url("")])
            .args(flags),
    )
}

fn instance_id(body: &Value) -> String {
    body["instance"].as_str().expect("an instance").to_owned()
}

#[tokio::test]
async fn a_killed_leaders_roles_are_taken_within_ttl_plus_poll() {
    let database = TestDatabase::create().await;
    let leases = Leases::SHORT;
    let mut a = replica(&database, "lease-a", leases);
    let mut b = replica(&database, "lease-b", leases);
    a.deploy_accepted(BANK).await;
    let holders = until_one_leader_per_role(&[&a, &b]).await;

    let (doomed, survivor) = if holders["timers"] == "lease-a" {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    let killed = Instant::now();
    doomed.kill();
    let bound = leases.ttl + leases.poll + SLACK;
    let failover = until_it_leads_everything(survivor, killed, bound).await;

    eprintln!(
        "lease failover after SIGKILL: {failover:?} (ttl {:?} + poll {:?}; held before: {holders:?})",
        leases.ttl, leases.poll
    );
}

#[tokio::test]
async fn a_leader_frozen_past_its_lease_wakes_up_leading_nothing() {
    let database = TestDatabase::create().await;
    let leases = Leases::SHORT;
    let a = replica(&database, "lease-a", leases);
    let b = replica(&database, "lease-b", leases);
    a.deploy_accepted(BANK).await;
    let holders = until_one_leader_per_role(&[&a, &b]).await;
    let (frozen, survivor) = if holders["timers"] == "lease-a" {
        (&a, &b)
    } else {
        (&b, &a)
    };

    let froze = Instant::now();
    frozen.freeze();
    let bound = leases.ttl + leases.poll + SLACK;
    let taken = until_it_leads_everything(survivor, froze, bound).await;
    frozen.thaw();

    eprintln!("roles taken from a frozen leader after {taken:?}");
    // Its terms ended by its own clock while it was frozen: it leads nothing from the moment it
    // answers again, and its renewals find the leases taken.
    let thawed = Instant::now();
    while thawed.elapsed() < 4 * leases.poll {
        let seen = seen_by(frozen).await;
        assert_eq!(
            seen.leading,
            Vec::<String>::new(),
            "{} woke up leading",
            seen.replica
        );
    }
    assert!(one_leader_per_role(&[&a, &b]).await.is_some());
    until_it_leads_everything(survivor, thawed, SLACK).await;
}

#[tokio::test]
async fn a_stopped_leaders_roles_are_taken_at_the_next_poll_not_after_the_ttl() {
    let database = TestDatabase::create().await;
    let leases = Leases::LONG_TTL;
    let mut a = replica(&database, "lease-a", leases);
    let mut b = replica(&database, "lease-b", leases);
    a.deploy_accepted(BANK).await;
    let holders = until_one_leader_per_role(&[&a, &b]).await;

    let (stopping, survivor) = if holders["timers"] == "lease-a" {
        (&mut a, &b)
    } else {
        (&mut b, &a)
    };
    let stopped = Instant::now();
    assert!(stopping.stop().success());
    let handover = until_it_leads_everything(survivor, stopped, SLACK).await;

    eprintln!(
        "lease handover after SIGTERM: {handover:?} (poll {:?}; a lease lasts {:?})",
        leases.poll, leases.ttl
    );
    assert!(handover < leases.ttl, "the TTL was waited out");
}

#[tokio::test]
async fn a_restarted_replica_leads_at_once_after_a_graceful_stop() {
    let database = TestDatabase::create().await;
    let leases = Leases::LONG_TTL;
    let mut first = replica(&database, "lease-a", leases);
    first.deploy_accepted(BANK).await;
    until_it_leads_everything(&first, Instant::now(), sutra_testkit::PATIENCE).await;

    let stopped = Instant::now();
    assert!(first.stop().success());
    // A new incarnation is a new replica id (decision 0008).
    let restarted = replica(&database, "lease-a-2", leases);
    let handover = until_it_leads_everything(&restarted, stopped, SLACK).await;

    eprintln!(
        "stop and restart to leading every role: {handover:?} (a lease lasts {:?})",
        leases.ttl
    );
    assert!(handover < leases.ttl, "the restart waited out the TTL");
    let table = sutra_leases(&restarted, &[]);
    assert!(
        table.starts_with("ROLE  ") && table.contains("timers  ") && table.contains("lease-a-2"),
        "{table}"
    );
    let listed: Value = serde_json::from_str(&sutra_leases(&restarted, &["--json"])).unwrap();
    let holders: Vec<&str> = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lease| lease["holder"].as_str().unwrap())
        .collect();
    assert_eq!(holders, ["lease-a-2"; ROLES.len()], "{listed:#}");
}

#[tokio::test]
async fn a_deployment_made_on_one_replica_is_live_on_another_within_one_poll() {
    let database = TestDatabase::create().await;
    let leases = Leases::LONG_POLL;
    let a = replica(&database, "deploy-a", leases);
    let b = Server::start(&options(database.url(), "deploy-b", leases).lanes(2));

    let deployed = Instant::now();
    a.deploy_accepted(BANK).await;
    let (_, first) = until_accepted(&b, "t-1", deployed).await;
    let deployed = Instant::now();
    a.deploy_accepted(&BANK.replace("TRANSFER.REFUSED", "TRANSFER.DECLINED"))
        .await;
    let second = loop {
        let (body, elapsed) = until_accepted(
            &b,
            &format!("t-{}", deployed.elapsed().as_micros()),
            deployed,
        )
        .await;
        if b.instance(&instance_id(&body)).await["version"] == 2 {
            break elapsed;
        }
        assert!(
            elapsed < sutra_testkit::PATIENCE,
            "version 2 never started on B"
        );
    };

    eprintln!(
        "deployment live on the other replica: version 1 after {first:?}, version 2 after {second:?} (poll {:?})",
        leases.poll
    );
    // The poll alone would take most of a minute: this is the notice.
    for converged in [first, second] {
        assert!(converged < SLACK, "{converged:?}");
    }
    let seen = seen_by(&b).await;
    assert!(
        seen.held.contains_key("channel:default:bank-replies"),
        "the singleton channel's role was registered on first need: {:?}",
        seen.held
    );
}

#[tokio::test]
async fn on_one_sqlite_file_every_process_leads_and_deployments_converge_by_polling() {
    let scratch = Scratch::new("leases-sqlite");
    let leases = Leases {
        ttl: Duration::from_secs(30),
        poll: Duration::from_secs(1),
    };
    let a = Server::start(&options(&scratch.database(), "file-a", leases));
    let b = Server::start(&options(&scratch.database(), "file-b", leases));

    let deployed = Instant::now();
    a.deploy_accepted(BANK).await;
    let (_, converged) = until_accepted(&b, "t-1", deployed).await;

    eprintln!(
        "deployment live on the second process: {converged:?} (poll {:?})",
        leases.poll
    );
    assert!(converged < leases.poll + SLACK);
    for server in [&a, &b] {
        let seen = seen_by(server).await;
        assert!(seen.held.is_empty(), "no lease is taken: {:?}", seen.held);
        let mut leading = seen.leading.clone();
        leading.sort();
        assert_eq!(leading, ROLES, "{} leads every role", seen.replica);
    }
    let table = sutra_leases(&b, &[]);
    assert!(
        table.starts_with("no leases:")
            && table.ends_with(
                "replica file-b leads channel:default:bank-replies, history-purger, \
                 instance-sweeper, retirement-gate, scheduler, timers\n"
            ),
        "{table}"
    );
}

#[tokio::test]
async fn the_purger_removes_an_old_completed_instance_and_keeps_a_failed_one() {
    let database = TestDatabase::create().await;
    let retention = Duration::from_secs(1);
    let server = Server::start(
        &options(database.url(), "purger", Leases::SHORT)
            .env("SUTRA_HISTORY_RETENTION", &sutra_testkit::iso(retention))
            .env("SUTRA_HISTORY_PURGE_INTERVAL", "PT0.2S"),
    );
    server.deploy_accepted(BANK).await;
    let (_, body) = server
        .send("transfers", "t-ok", json!({"id": "ok", "ok": true}))
        .await;
    let completed = instance_id(&body);
    let (_, body) = server
        .send("transfers", "t-bad", json!({"id": "bad", "ok": false}))
        .await;
    let failed = instance_id(&body);
    server.wait_for_status(&completed, "completed").await;
    server.wait_for_status(&failed, "failed").await;

    let ended = Instant::now();
    loop {
        let (status, _) = server.get(&format!("/v1/instances/{completed}")).await;
        if status == 404 {
            break;
        }
        assert!(ended.elapsed() < retention + SLACK, "never purged");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "completed instance purged {:?} after it ended (retention {retention:?})",
        ended.elapsed()
    );

    // Several purges later, the failed instance is still whole.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let kept = server.instance(&failed).await;
    assert_eq!(kept["failure"]["code"], "TRANSFER.REFUSED");
    sutra_testkit::assert_audit_sequence_is_whole(&server.history(&failed).await);
    // Its dedup record went with it: the same message starts afresh (docs/decisions/0018).
    let (_, again) = server
        .send("transfers", "t-ok", json!({"id": "ok", "ok": true}))
        .await;
    assert_eq!(again["dedup"], false, "{again}");
    assert_ne!(instance_id(&again), completed);
    let (_, again) = server
        .send("transfers", "t-bad", json!({"id": "bad", "ok": false}))
        .await;
    assert_eq!(
        (again["dedup"].as_bool(), instance_id(&again)),
        (Some(true), failed)
    );
}
