//! Failover without loss (issue 48; docs/decisions/0080-failover-through-a-multi-host-url.md):
//! the replica workload of `replicas.rs` — transfers of two tasks and an outbox row, the pull
//! surface and the relay both — on a PostgreSQL primary with a synchronous streaming standby,
//! while the primary crashes (an immediate shutdown, and it stays down) and the standby is
//! promoted. The replicas name both hosts in one URL (`target_session_attrs=read-write`), as
//! libpq's users write it, and must follow the promoted one by themselves.
//!
//! Afterwards the workload's invariants hold on the promoted database (`common::audit`): every
//! accepted event consumed exactly once, no instance advanced twice, every transfer completed,
//! every outbox row sent, nothing left claimed — and the history every replica recorded passes
//! the history checker (decision 0043): every commit a replica acknowledged is in one chain per
//! instance on the promoted database, none applied twice. The failover counts as a database crash
//! for the checker: a poll's lock commits without waiting for the disk or the standby (decision
//! 0035), so one answered just before the crash may be lost with it.

mod common;

use std::time::{Duration, Instant};

use common::{
    Fleet, Timing, Workers, assert_nothing_stranded, assert_resends_are_duplicates, audit,
    distinct, heard, history, send_paced, transfers, wait_for_ledger,
};
use sutra_testkit::postgres::ReplicatedCluster;
use sutra_testkit::{Receiver, Server, serve};

const REPLICAS: usize = 2;
/// Transfers are sent over this window, the failover a third of the way in: work in flight
/// meets it, and work after it must run on the promoted standby alone.
const WINDOW: Duration = Duration::from_secs(15);
const FAIL_OVER_AT: Duration = Duration::from_secs(5);
const TRANSFERS_PER_SECOND: f64 = 12.0;
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_step_survives_a_failover_to_the_synchronous_standby_at_1_lane() {
    survives_a_failover(1).await
}

/// At four lanes too: group commit and the deferred acknowledgement have windows only there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_acknowledged_step_survives_a_failover_to_the_synchronous_standby_at_4_lanes() {
    survives_a_failover(4).await
}

async fn survives_a_failover(lanes: usize) {
    let timing = Timing::SHORT;
    let began = Instant::now();
    let cluster = ReplicatedCluster::start().await;
    println!(
        "failover: a primary and its synchronous standby up in {:.2} s",
        began.elapsed().as_secs_f64()
    );
    let receiver = Receiver::accepting();
    let deployment = transfers(&receiver.url("/ledger"));
    let fleet = (Fleet::of("failover", REPLICAS, timing).lanes(lanes))
        .start(&cluster.url(), &deployment)
        .await;
    println!(
        "failover: {REPLICAS} replicas at {lanes} lane(s) up at {:.2} s",
        began.elapsed().as_secs_f64()
    );
    let urls = fleet.urls();
    let workers = Workers::start(&urls, timing);
    let http = reqwest::Client::new();

    let senders = send_paced(&http, &urls, WINDOW, TRANSFERS_PER_SECOND);
    tokio::time::sleep(FAIL_OVER_AT).await;
    cluster.stop_primary().await;
    let (crashed_at, stopped) = (jiff::Timestamp::now().as_microsecond(), Instant::now());
    cluster.promote_standby().await;
    let failed_over = Instant::now();
    println!(
        "failover: primary stopped, standby promoted {:.2} s later",
        failed_over.duration_since(stopped).as_secs_f64()
    );

    let mut accepted = Vec::new();
    for sender in senders {
        accepted.push(sender.await.expect("a sender does not panic"));
    }
    let recovered = wait_for_ledger(
        &receiver,
        accepted.len(),
        failed_over,
        timing.recovery_bound(),
        fleet.replica(0),
    )
    .await;
    workers.stop().await;

    let found = audit(fleet.replica(0), &accepted, &receiver).await;
    let heard = heard(&receiver);
    let histories = fleet.histories_settled(accepted.len(), distinct(&heard));
    let history = history::check(&histories, &accepted, &heard, &[], &[crashed_at], 0);
    println!("failover: {history}");
    history.assert_clean();
    assert_resends_are_duplicates(&http, &urls, &accepted).await;
    assert_nothing_stranded(cluster.standby_admin_url()).await;
    let resent = accepted.iter().filter(|sent| sent.attempts > 1).count();
    println!(
        "failover: {} transfers accepted ({resent} only after retries), all completed exactly \
         once on the promoted standby, the last {:.2} s after the failover; ledger duplicates {}",
        accepted.len(),
        recovered.as_secs_f64(),
        found.ledger_duplicates,
    );
}

/// A replica whose URL names no host that accepts writes — a standby, and a port nothing listens
/// on — refuses to start, naming each host and why, never the password.
#[tokio::test]
async fn a_url_without_a_writable_host_is_refused_at_start_naming_each_host() {
    let cluster = ReplicatedCluster::start().await;
    let said = match Server::try_start(&serve!(cluster.url_without_a_primary())) {
        Ok(_) => panic!("sutra serve started on a standby"),
        Err(said) => said,
    };
    assert!(
        said.contains("none of the URL's 2 hosts accepts writes"),
        "{said}"
    );
    assert!(said.contains("a standby"), "{said}");
    assert!(
        !said.contains(":sutra@"),
        "the password is not printed: {said}"
    );
}
