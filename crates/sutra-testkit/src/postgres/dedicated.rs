//! A PostgreSQL cluster of one test's own, which the test may take down and bring back.
//!
//! The shared cluster (or the server `SUTRA_TEST_DATABASE_URL` names) serves every test of the
//! process at once, so restarting it would fail tests that have nothing to do with the restart.
//! A test that restarts PostgreSQL — to prove that replicas ride through the database going away
//! — starts a [`DedicatedCluster`] instead: always from the installed binaries, whatever
//! `SUTRA_TEST_DATABASE_URL` says, in a directory of its own, with one database set up as every
//! test database is (owned and migrated by the schema's owner, served by the engine's role).
//!
//! [`DedicatedCluster::start_over_tls`] makes one that PostgreSQL's clients reach as a production
//! database is reached: over TCP on 127.0.0.1 with TLS only (its certificate signed by a test's
//! [`Authority`]), a password to log in, and no connection without TLS accepted.
//!
//! A supervising shell runs `postgres` and obeys two files the test drops in the cluster's
//! directory: `hold-down` (stop PostgreSQL with an immediate shutdown — no checkpoint, crash
//! recovery at the next start — and keep it down while the file exists) and `stop` (shut down
//! and remove everything). As for the shared cluster, it also stops everything as soon as the
//! test process is gone, however that ends.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use sqlx::{Connection, PgConnection};
use url::Url;

use super::{
    ENGINE_ROLE, OWNER_ROLE, PASSWORD, STARTUP, admin_url, binaries, cluster_directory,
    connect_admin, execute, free_port, give_to_cluster_user, init_cluster, running_as_root, url_of,
};
use crate::Authority;

/// The one database of the cluster, owned by [`OWNER_ROLE`].
const DATABASE: &str = "sutra";

/// A throwaway cluster for one test, stopped and removed when dropped.
pub struct DedicatedCluster {
    pub(super) dir: PathBuf,
    pub(super) port: u16,
    admin: Url,
    url: String,
    owner_url: String,
    admin_url: String,
}

impl DedicatedCluster {
    /// Runs `initdb`, starts PostgreSQL, listening on a unix socket only, and creates the
    /// database, migrated. Panics when PostgreSQL is not installed: a test that restarts the
    /// database cannot borrow someone else's.
    pub async fn start() -> DedicatedCluster {
        let cluster = DedicatedCluster::set_up(Listen::Socket).await;
        sutra_store_postgres::migrate(&cluster.owner_url)
            .await
            .unwrap_or_else(|e| panic!("cannot migrate the dedicated cluster's database: {e}"));
        cluster
    }

    /// Like [`DedicatedCluster::start`], but listening on 127.0.0.1 too, over TLS only: its
    /// certificate, for `127.0.0.1` and `localhost`, is signed by `authority`, and its
    /// `pg_hba.conf` has `hostssl` lines alone, so a connection without TLS is refused. Its
    /// database is left empty, for the test to migrate over TLS. [`DedicatedCluster::url`] and
    /// [`DedicatedCluster::owner_url`] reach it over TCP, and say nothing of TLS: the test adds
    /// the `sslmode` it means. Panics when PostgreSQL is not installed.
    pub async fn start_over_tls(authority: &Authority) -> DedicatedCluster {
        DedicatedCluster::set_up(Listen::Tls(authority)).await
    }

    /// Like [`DedicatedCluster::start`], but listening on 127.0.0.1 too, without TLS (trusted,
    /// as `initdb --auth=trust` writes `pg_hba.conf`): a host a multi-host URL can name beside
    /// another.
    pub(super) async fn start_on_loopback() -> DedicatedCluster {
        let cluster = DedicatedCluster::set_up(Listen::Loopback).await;
        sutra_store_postgres::migrate(&cluster.owner_url)
            .await
            .unwrap_or_else(|e| panic!("cannot migrate the dedicated cluster's database: {e}"));
        cluster
    }

    async fn set_up(listen: Listen<'_>) -> DedicatedCluster {
        let bin = binaries().unwrap_or_else(|| {
            panic!(
                "this test starts a PostgreSQL cluster of its own from the installed binaries \
                 (to restart it, or to serve it over TLS): install the server (Debian: \
                 `apt-get install postgresql`)"
            )
        });
        let as_root = running_as_root();
        let dir = cluster_directory(as_root);
        init_cluster(as_root, &bin, &dir);
        let port = free_port();
        configure(as_root, &dir.join("data"), &listen);
        supervise(as_root, &bin.join("postgres"), &dir, port);
        // The test's own admin work goes over the unix socket, which `pg_hba.conf` trusts.
        let admin = admin_url(&dir, port);
        let pool = connect_admin(admin.clone())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to the dedicated cluster: {e}"));
        // As for every test database: owned and migrated by the schema's owner, served by the
        // engine's role, which owns nothing.
        execute(
            &pool,
            format!("CREATE DATABASE {DATABASE} OWNER {OWNER_ROLE}"),
        )
        .await
        .unwrap_or_else(|e| panic!("cannot create the dedicated cluster's database: {e}"));
        pool.close().await;
        let served = match listen {
            Listen::Socket => admin.clone(),
            Listen::Loopback | Listen::Tls(_) => {
                Url::parse(&format!("postgres://127.0.0.1:{port}/")).expect("a URL")
            }
        };
        DedicatedCluster::at(dir, port, admin, &served)
    }

    /// The cluster in `dir`, served at `served` (its admin at `admin`), its URLs on [`DATABASE`].
    pub(super) fn at(dir: PathBuf, port: u16, admin: Url, served: &Url) -> DedicatedCluster {
        DedicatedCluster {
            url: url_of(served, DATABASE, Some((ENGINE_ROLE, PASSWORD))),
            owner_url: url_of(served, DATABASE, Some((OWNER_ROLE, PASSWORD))),
            admin_url: url_of(&admin, DATABASE, None),
            admin,
            dir,
            port,
        }
    }

    /// The URL the engine serves with: [`ENGINE_ROLE`] on the cluster's database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of the schema's owner, [`OWNER_ROLE`], on the cluster's database: what
    /// `sutra db migrate` takes.
    pub fn owner_url(&self) -> &str {
        &self.owner_url
    }

    /// The admin's URL on the cluster's database, for checks that must look past row-level
    /// security.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }

    /// Stops PostgreSQL with an immediate shutdown, as a crash of the database server would:
    /// every connection is cut, nothing is checkpointed. Returns once it has exited; it stays
    /// down until [`DedicatedCluster::start_again`].
    pub async fn stop_immediately(&self) {
        std::fs::write(self.dir.join("hold-down"), b"").expect("ask the supervisor to stop it");
        self.wait_until("PostgreSQL stops", || self.dir.join("down").exists())
            .await;
    }

    /// Starts PostgreSQL again (crash recovery runs first) and returns once it accepts
    /// connections.
    pub async fn start_again(&self) {
        std::fs::remove_file(self.dir.join("hold-down")).expect("let the supervisor start it");
        self.wait_until("PostgreSQL starts", || !self.dir.join("down").exists())
            .await;
        let deadline = Instant::now() + STARTUP;
        while let Err(error) = PgConnection::connect(self.admin.as_str()).await {
            assert!(
                Instant::now() < deadline,
                "the dedicated cluster did not accept connections within {STARTUP:?} of its \
                 restart: {error}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_until(&self, what: &str, done: impl Fn() -> bool) {
        let deadline = Instant::now() + STARTUP;
        while !done() {
            assert!(
                Instant::now() < deadline,
                "{what}: not within {STARTUP:?}\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("postgres.log")).unwrap_or_default()
    }
}

impl Drop for DedicatedCluster {
    /// Asks the supervisor to stop PostgreSQL and remove the directory, and waits (boundedly)
    /// until it has, so that no `postgres` outlives the test that started it.
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.dir.join("hold-down"));
        if std::fs::write(self.dir.join("stop"), b"").is_err() {
            return;
        }
        let deadline = Instant::now() + STARTUP;
        while self.dir.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Where a dedicated cluster listens.
enum Listen<'a> {
    /// A unix socket alone.
    Socket,
    /// 127.0.0.1 too, as `initdb` trusts it.
    Loopback,
    /// 127.0.0.1 too, TLS only, with a certificate the authority signs.
    Tls(&'a Authority),
}

/// Appends the cluster's listening and TLS settings to its `postgresql.conf` (where they stay
/// across the supervisor's restarts): a unix socket alone, or 127.0.0.1 too — with TLS, a
/// certificate the authority signs, and TLS demanded of every TCP connection.
fn configure(as_root: bool, data: &Path, listen: &Listen<'_>) {
    let settings = match listen {
        Listen::Socket => "listen_addresses = ''\n",
        Listen::Loopback => "listen_addresses = '127.0.0.1'\n",
        Listen::Tls(authority) => {
            let issued = authority.issue(&["127.0.0.1", "localhost"]);
            // PostgreSQL refuses a key file others may read, and must own it to read it.
            for (file, pem) in [
                ("server.crt", &issued.certificate_pem),
                ("server.key", &issued.key_pem),
            ] {
                let path = data.join(file);
                std::fs::write(&path, pem).expect("write the server's certificate");
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .expect("make the server's key private");
                give_to_cluster_user(as_root, &path);
            }
            // The unix socket is the test's own way in; over TCP, TLS and a password or nothing.
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 scram-sha-256\n",
            )
            .expect("write pg_hba.conf");
            "listen_addresses = '127.0.0.1'\nssl = on\n\
             ssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n"
        }
    };
    let mut conf = std::fs::OpenOptions::new()
        .append(true)
        .open(data.join("postgresql.conf"))
        .expect("open postgresql.conf");
    conf.write_all(settings.as_bytes())
        .expect("write postgresql.conf");
}

/// Runs `postgres` and obeys the test's files (see the module's doc). `alive` reads `/proc`, which
/// tells whether a process lives even when it belongs to another user, as `kill -0` cannot.
///
/// Durability: `fsync` is off because a restart kills processes, not the kernel: whatever
/// PostgreSQL wrote reaches the page cache and survives. `synchronous_commit` stays on: with it
/// off an immediate shutdown would lose commits already acknowledged — a loss the test database
/// would cause, which a test of Sutra must not mistake for Sutra's.
const SUPERVISOR: &str = r#"
dir=$1 watched=$2 postgres=$3 port=$4
run() {
    "$postgres" -D "$dir/data" -k "$dir" -p "$port" \
        -c fsync=off -c full_page_writes=off -c max_connections=100 \
        >>"$dir/postgres.log" 2>&1 &
    server=$!
}
alive() { if [ -d /proc/self ]; then [ -d "/proc/$1" ]; else kill -0 "$1" 2>/dev/null; fi; }
run
while alive "$watched" && [ ! -e "$dir/stop" ]; do
    if [ -e "$dir/hold-down" ]; then
        kill -QUIT "$server" 2>/dev/null
        wait "$server"
        touch "$dir/down"
        while [ -e "$dir/hold-down" ] && [ ! -e "$dir/stop" ] && alive "$watched"; do
            sleep 0.02
        done
        [ -e "$dir/stop" ] || run
        rm -f "$dir/down"
    fi
    sleep 0.02
done
kill -INT "$server" 2>/dev/null
wait "$server"
rm -rf "$dir"
"#;

pub(super) fn supervise(as_root: bool, postgres: &Path, dir: &Path, port: u16) {
    super::spawn_supervisor(
        SUPERVISOR,
        "sutra-dedicated-postgres",
        as_root,
        postgres,
        dir,
        port,
    );
}
