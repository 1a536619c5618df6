//! A replica cut off from its database by the network (SPEC §6, decision 0018; issue 17's faults):
//! not dead, not frozen — its process runs, its HTTP answers, but every statement it sends waits
//! in a partition (`sutra_testkit::proxy`, on loopback) and nothing tells it the lease it holds
//! is expiring. The rule that keeps roles single is the local deadline: the replica stops
//! leading before its lease can expire in the database, so by the time another replica takes a
//! role the cut-off one has already given it up. After the partition heals the roles still have
//! one leader each, and the healed replica does work again.
//!
//! Every duration asserted is an upper bound far above what the design promises: a slow machine
//! makes this test slower, never red.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::proxy::Proxy;
use sutra_testkit::{PATIENCE, Server, serve, until};

const TTL: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(500);

const FLOWS: &str = r#"
name: shop
channels:
  orders:
    transport: http
    correlate: data.id
flows:
  order:
    start: { channel: orders }
    nodes:
      - id: cool
        wait: { duration: PT0.1S }
      - id: done
        end: {}
"#;

fn replica(datasource: &str, id: &str) -> Server {
    Server::start(&serve!(datasource).replica(id).leases(TTL, POLL))
}

/// Whether `server` says, in its own gauge, that it leads `role` now. Read from `/metrics`,
/// which answers from the process alone when its database does not.
async fn leads(server: &Server, role: &str) -> bool {
    let series = format!("sutra_lease_leader{{role=\"{role}\"}}");
    server.metric(&series).await == Some(1.0)
}

/// The holder of `role` whose lease has not expired, as `server` reads the lease rows.
async fn holder(server: &Server, role: &str) -> Option<String> {
    let (status, body) = server.get("/v1/leases").await;
    assert_eq!(status, 200, "{body}");
    let now = jiff::Timestamp::now();
    body["items"].as_array()?.iter().find_map(|lease| {
        let expires: jiff::Timestamp = lease["expires_at"].as_str()?.parse().ok()?;
        (lease["role"] == role && expires > now).then(|| lease["holder"].as_str().unwrap().into())
    })
}

async fn completes(server: &Server, event: &str) {
    let (status, body) = server.send("orders", event, json!({ "id": event })).await;
    assert_eq!(status, 202, "{body}");
    let id = body["instance"].as_str().unwrap().to_owned();
    until(&format!("{event} completes"), async || {
        let (_, instance): (u16, Value) = server.get(&format!("/v1/instances/{id}")).await;
        instance["status"] == "completed"
    })
    .await;
}

#[tokio::test]
async fn a_replica_cut_off_from_its_database_stops_leading_before_another_takes_over() {
    let database = TestDatabase::create().await;
    let (proxy, through_proxy) = Proxy::in_front_of(database.url());
    let a = replica(&through_proxy, "replica-a");
    a.deploy_accepted(FLOWS).await;
    until("replica-a leads timers", async || leads(&a, "timers").await).await;
    let b = replica(database.url(), "replica-b");
    completes(&a, "before").await;

    proxy.partition();
    let cut_off = Instant::now();
    // Polled as fast as the replicas answer: the moment B holds the lease, A must no longer say
    // it leads — its term ended on its own clock, with no word from the database.
    loop {
        let b_holds = holder(&b, "timers").await.as_deref() == Some("replica-b");
        let a_leads = leads(&a, "timers").await;
        if b_holds {
            assert!(
                !a_leads,
                "replica-b holds timers while the cut-off replica-a still leads it"
            );
            break;
        }
        assert!(
            cut_off.elapsed() < PATIENCE,
            "replica-b never took timers from the cut-off replica-a"
        );
    }
    println!(
        "replica-b took timers {:?} after the partition",
        cut_off.elapsed()
    );
    // B does the fleet's timed work meanwhile.
    completes(&b, "during").await;

    proxy.heal();
    completes(&a, "after").await;
    until("one replica leads timers", async || {
        leads(&a, "timers").await != leads(&b, "timers").await
    })
    .await;
}
