//! A primary and its streaming standby, each a [`DedicatedCluster`] of the test's own, for tests
//! of failover: the primary stops as a crashed server does, the standby is promoted, and the
//! engine must follow it through a URL that names both.
//!
//! Replication is synchronous (`synchronous_standby_names` names the standby, and
//! `synchronous_commit` stays on): the primary acknowledges a commit once the standby has it, so
//! a promoted standby holds every commit a client was told of — what a production setup that
//! promises no loss on failover configures. Both listen on 127.0.0.1, trusted, each on a port of
//! its own; the standby streams over the primary's unix socket.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use url::Url;

use super::dedicated::{DedicatedCluster, supervise};
use super::{
    ENGINE_ROLE, PASSWORD, STARTUP, admin_url, as_cluster_user, binaries, cluster_directory,
    free_port, running_as_root,
};

/// The standby's name, as the primary's `synchronous_standby_names` waits for it.
const STANDBY_NAME: &str = "standby";

/// A primary with a synchronous standby; both stopped and removed when dropped.
pub struct ReplicatedCluster {
    primary: DedicatedCluster,
    standby: DedicatedCluster,
}

impl ReplicatedCluster {
    /// Starts the primary (its database created and migrated), copies it with `pg_basebackup`,
    /// starts the copy as a standby streaming from it, and returns once the primary counts the
    /// standby as synchronous. Panics when PostgreSQL is not installed.
    pub async fn start() -> ReplicatedCluster {
        let primary = DedicatedCluster::start_on_loopback().await;
        let standby = standby_of(&primary).await;
        let cluster = ReplicatedCluster { primary, standby };
        cluster.make_synchronous().await;
        cluster
    }

    /// The engine's URL naming both hosts, primary first, as libpq's users write it.
    pub fn url(&self) -> String {
        hosts_url(&[self.primary.port, self.standby.port])
    }

    /// The engine's URL naming the standby first, then a port nothing listens on: no host of it
    /// accepts writes until the standby is promoted.
    pub fn url_without_a_primary(&self) -> String {
        hosts_url(&[self.standby.port, free_port()])
    }

    /// The admin's URL on the standby's database: after [`ReplicatedCluster::promote_standby`], the
    /// primary's.
    pub fn standby_admin_url(&self) -> &str {
        self.standby.admin_url()
    }

    /// Stops the primary with an immediate shutdown (a crash, to its clients); it stays down.
    pub async fn stop_primary(&self) {
        self.primary.stop_immediately().await;
    }

    /// Promotes the standby, and returns once it accepts writes.
    pub async fn promote_standby(&self) {
        let bin = binaries().expect("PostgreSQL's binaries, as at start");
        let promoted = as_cluster_user(running_as_root(), &bin.join("pg_ctl"))
            .args(["promote", "--wait", "-D"])
            .arg(self.standby.dir.join("data"))
            .stdin(Stdio::null())
            .output()
            .expect("run pg_ctl promote");
        assert!(
            promoted.status.success(),
            "pg_ctl promote failed:\n{}",
            String::from_utf8_lossy(&promoted.stderr)
        );
        let admin = self.standby.admin_url();
        wait_for("the promoted standby to accept writes", || async move {
            let mut connection = PgConnection::connect(admin).await.ok()?;
            let in_recovery: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
                .fetch_one(&mut connection)
                .await
                .ok()?;
            (!in_recovery).then_some(())
        })
        .await;
    }

    /// Names the standby in the primary's `synchronous_standby_names` and waits until the
    /// primary reports it `sync`. Set only now: with it set before the standby streams, the
    /// primary's own setup (creating and migrating the database) would wait for a standby that
    /// does not exist yet.
    async fn make_synchronous(&self) {
        let admin = self.primary.admin_url();
        let mut connection = PgConnection::connect(admin)
            .await
            .unwrap_or_else(|e| panic!("connect to the primary: {e}"));
        for sql in [
            format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"),
            "SELECT pg_reload_conf()".to_owned(),
        ] {
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut connection)
                .await
                .unwrap_or_else(|e| panic!("make the standby synchronous: {e}"));
        }
        wait_for(
            "the primary to count its standby as synchronous",
            || async move {
                let mut connection = PgConnection::connect(admin).await.ok()?;
                let state: String = sqlx::query_scalar(
                    "SELECT sync_state FROM pg_stat_replication WHERE application_name = $1",
                )
                .bind(STANDBY_NAME)
                .fetch_one(&mut connection)
                .await
                .ok()?;
                (state == "sync").then_some(())
            },
        )
        .await;
    }
}

/// The engine's URL on the cluster's database at these loopback ports, in this order.
fn hosts_url(ports: &[u16]) -> String {
    let hosts: Vec<String> = ports
        .iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    format!(
        "postgres://{ENGINE_ROLE}:{PASSWORD}@{}/sutra?target_session_attrs=read-write",
        hosts.join(",")
    )
}

/// A copy of `primary` taken with `pg_basebackup` and started as its streaming standby.
async fn standby_of(primary: &DedicatedCluster) -> DedicatedCluster {
    let bin = binaries().expect("PostgreSQL's binaries, as for the primary");
    let as_root = running_as_root();
    let dir = cluster_directory(as_root);
    let data = dir.join("data");
    let copied = as_cluster_user(as_root, &bin.join("pg_basebackup"))
        .args(["--wal-method=stream", "--write-recovery-conf", "--no-sync"])
        // A spread checkpoint would take minutes on an idle cluster.
        .arg("--checkpoint=fast")
        .args(["--username=postgres", "--host"])
        .arg(&primary.dir)
        .args(["--port", &primary.port.to_string(), "-D"])
        .arg(&data)
        .stdin(Stdio::null())
        .output()
        .expect("run pg_basebackup");
    assert!(
        copied.status.success(),
        "pg_basebackup failed:\n{}",
        String::from_utf8_lossy(&copied.stderr)
    );
    name_the_standby(&data, primary);
    let port = free_port();
    supervise(as_root, &bin.join("postgres"), &dir, port);
    let admin = admin_url(&dir, port);
    let reach = admin.to_string();
    wait_for("the standby to accept connections", || {
        let reach = reach.clone();
        async move { PgConnection::connect(&reach).await.ok().map(|_| ()) }
    })
    .await;
    let served = Url::parse(&format!("postgres://127.0.0.1:{port}/")).expect("a URL");
    DedicatedCluster::at(dir, port, admin, &served)
}

/// Overrides the `primary_conninfo` `pg_basebackup` wrote (a later line wins) with one that
/// names the standby, so that the primary's `synchronous_standby_names` can wait for it.
fn name_the_standby(data: &Path, primary: &DedicatedCluster) {
    use std::io::Write;
    let line = format!(
        "primary_conninfo = 'host={} port={} user=postgres application_name={STANDBY_NAME}'\n",
        primary.dir.display(),
        primary.port
    );
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.auto.conf"))
        .expect("open the standby's postgresql.auto.conf");
    conf.write_all(line.as_bytes())
        .expect("write the standby's primary_conninfo");
}

/// Polls `ready` until it answers, for at most [`STARTUP`].
async fn wait_for<F, Fut>(what: &str, ready: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<()>>,
{
    let deadline = Instant::now() + STARTUP;
    while ready().await.is_none() {
        assert!(Instant::now() < deadline, "{what}: not within {STARTUP:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
