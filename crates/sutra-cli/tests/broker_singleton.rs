//! A `singleton: true` broker channel (SPEC §6) is consumed by one replica at a time — the one
//! holding its `channel:{tenant}:{channel}` lease — and by another within a lease TTL and a poll
//! once that one dies. Checked from RabbitMQ's side: the queue never has two consumers, and what
//! is held unacknowledged is held by the one. Three real `sutra serve` processes over one
//! PostgreSQL database and the machine's RabbitMQ.

use std::time::{Duration, Instant};

use serde_json::json;
use sutra_testkit::brokers::{QueueCounts, TestQueue};
use sutra_testkit::postgres::TestDatabase;
use sutra_testkit::{Server, event, serve};

/// How long a lease lasts, and how often replicas try for it.
const TTL: Duration = Duration::from_secs(3);
const POLL: Duration = Duration::from_millis(500);
/// Far above a healthy handover's scheduling, process start-up and broker round trips.
const SLACK: Duration = Duration::from_secs(10);

const ROLE: &str = "channel:default:jobs";
const JOBS: usize = 3;

/// Each job is held unacknowledged (`ack: complete`) until a `done` message ends it, which this
/// test never sends: every consumer of `jobs` holds what it took.
fn deployment(queue: &str) -> String {
    format!(
        r#"
name: jobs
channels:
  jobs: {{ transport: amqp, queue: {queue}, singleton: true, correlate: data.id, ack: complete, ack-timeout: PT60S }}
  done: {{ transport: http, correlate: data.id }}
flows:
  job:
    start: {{ channel: jobs }}
    nodes:
      - id: wait
        receive: {{ channel: done, key: vars.input.id }}
"#
    )
}

fn replica(database: &TestDatabase, id: &str) -> Server {
    Server::start(&serve!(database.url()).amqp().replica(id).leases(TTL, POLL))
}

/// Whether `server` says it leads the channel's role.
async fn leads(server: &Server) -> bool {
    let (status, body) = server.get("/v1/leases").await;
    assert_eq!(status, 200, "{body}");
    body["leading"]
        .as_array()
        .is_some_and(|roles| roles.iter().any(|role| role == ROLE))
}

/// Samples the queue until `done` holds, failing the test if it ever has two consumers, or if
/// `within` passes first.
async fn watch(
    queue: &TestQueue,
    what: &str,
    within: Duration,
    done: impl Fn(QueueCounts) -> bool,
) -> QueueCounts {
    let since = Instant::now();
    loop {
        let counts = queue.counts();
        assert!(
            counts.consumers <= 1,
            "two replicas consume the singleton channel at once: {counts:?}"
        );
        if done(counts) {
            return counts;
        }
        assert!(
            since.elapsed() < within,
            "the queue did not {what} within {within:?}: {counts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn one_replica_at_a_time_consumes_a_singleton_channel_and_another_takes_over_when_it_dies() {
    let database = TestDatabase::create().await;
    let queue = TestQueue::declare("sutra-test-singleton").await;
    let mut replicas: Vec<Server> = ["a", "b", "c"]
        .into_iter()
        .map(|id| replica(&database, id))
        .collect();
    replicas[0].deploy_accepted(&deployment(&queue.name)).await;
    for n in 0..JOBS {
        queue
            .publish_event(&event(&format!("job-{n}"), json!({"id": format!("j{n}")})))
            .await;
    }

    let held = |c: QueueCounts| c.consumers == 1 && c.unacknowledged == JOBS as u64;
    watch(&queue, "be held by one consumer", SLACK, held).await;
    // Held for a while, by one replica only.
    let steady = Instant::now() + Duration::from_secs(2);
    watch(&queue, "stay held", SLACK, |c| {
        held(c) && Instant::now() > steady
    })
    .await;
    let mut leaders = Vec::new();
    for (index, server) in replicas.iter().enumerate() {
        if leads(server).await {
            leaders.push(index);
        }
    }
    let [leader] = leaders[..] else {
        panic!("one replica leads {ROLE}, not {leaders:?}");
    };

    replicas[leader].kill();
    let killed = Instant::now();
    // Its connection is gone: RabbitMQ takes the messages back, and the next leader takes them.
    watch(
        &queue,
        "be held by the next leader",
        TTL + POLL + SLACK,
        held,
    )
    .await;
    let handover = killed.elapsed();
    let survivors: Vec<&Server> = replicas
        .iter()
        .enumerate()
        .filter(|(index, _)| *index != leader)
        .map(|(_, server)| server)
        .collect();
    let mut leading = 0;
    for server in &survivors {
        leading += usize::from(leads(server).await);
    }
    assert_eq!(leading, 1, "one survivor leads {ROLE}");
    let (_, list) = survivors[0].get("/v1/instances?limit=100").await;
    assert_eq!(
        list["items"].as_array().map(Vec::len),
        Some(JOBS),
        "the redeliveries are dedup hits: {list}"
    );
    assert!(handover < TTL + POLL + SLACK, "handover took {handover:?}");

    for server in &mut replicas {
        server.kill();
    }
    queue.delete().await;
}
