//! PostgreSQL for tests, the way a newcomer's machine allows: each test gets a fresh database of
//! its own, created for it and dropped after it.
//!
//! Where the databases live:
//! - `SUTRA_TEST_DATABASE_URL` set: the server it names. It is an admin URL (a superuser, as CI's
//!   `postgres` on 127.0.0.1); databases are created and dropped through it.
//! - Otherwise a throwaway cluster this test process starts itself from the installed PostgreSQL
//!   binaries (`pg_config --bindir`, else the newest `/usr/lib/postgresql/*/bin`): `initdb` in a
//!   temporary directory, listening only on a unix socket in that directory, one cluster per test
//!   binary, started the first time a test asks and shared by all of them. A small supervising
//!   shell stops it and removes the directory as soon as this process is gone, however it ends,
//!   so no `postgres` outlives the tests. As root (CI, containers) `initdb` and `postgres` refuse
//!   to run, so they run as the `postgres` OS user.
//!
//! No PostgreSQL at all fails the test with what to install: a suite that silently skipped the
//! production store would be a green light about nothing (and CI must never skip it).
//!
//! The engine never connects as the admin, nor as the tables' owner: as in a hardened production
//! setup (docs/decisions/0019-tenancy-and-tokens.md), each database is owned and migrated by
//! [`OWNER_ROLE`], and the engine logs in as roles that may only read and write rows: by default
//! [`ENGINE_ROLE`], a member of both `sutra_app` and `sutra_system`, which does tenants' work and
//! the store's cross-tenant work as one role; or, split as decision 0040 recommends,
//! [`SERVING_ROLE`] (`sutra_app` alone) beside [`SYSTEM_ROLE`] (`sutra_system` alone). None is a
//! superuser or BYPASSRLS — those ignore row-level security — and none owns anything, so none can
//! switch row security off: a test of tenant isolation run otherwise would prove nothing.

use std::future::Future;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Connection, PgConnection};
use url::Url;

mod dedicated;
mod replicated;

pub use dedicated::DedicatedCluster;
pub use replicated::ReplicatedCluster;

/// The variable naming an admin URL of a server to create test databases on.
pub const DATABASE_URL_VARIABLE: &str = "SUTRA_TEST_DATABASE_URL";

/// The role that owns every test database and its schema, and migrates it.
pub const OWNER_ROLE: &str = "sutra_owner";
/// The role the engine logs in as by default: a member of [`APP_GROUP`] and [`SYSTEM_GROUP`],
/// owning nothing.
pub const ENGINE_ROLE: &str = "sutra_engine";
/// A role that may act for tenants only: a member of [`APP_GROUP`] alone.
pub const SERVING_ROLE: &str = "sutra_serving";
/// A role that may act for the system only: a member of [`SYSTEM_GROUP`] alone.
pub const SYSTEM_ROLE: &str = "sutra_sweeping";
/// The group the schema's migration grants tenants' row access to.
pub const APP_GROUP: &str = "sutra_app";
/// The group the system scope, `'*'`, shows rows to (migration 0011).
pub const SYSTEM_GROUP: &str = "sutra_system";
/// Every login role's password: the cluster is a throwaway, or CI's own.
const PASSWORD: &str = "sutra";

/// How long a cluster may take to start, or a database to be created or dropped.
const STARTUP: Duration = Duration::from_secs(60);

/// A fresh database of its own for one test, dropped when this is dropped.
pub struct TestDatabase {
    name: String,
    url: String,
    serving_url: String,
    system_url: String,
    owner_url: String,
    admin_url: String,
}

impl TestDatabase {
    /// A database with Sutra's schema, migrated by [`OWNER_ROLE`] as an operator would before
    /// starting replicas. Panics when there is no PostgreSQL to use.
    pub async fn create() -> TestDatabase {
        let database = TestDatabase::empty().await;
        sutra_store_postgres::migrate(database.owner_url())
            .await
            .unwrap_or_else(|e| panic!("cannot migrate the test database {}: {e}", database.name));
        database
    }

    /// A database without any schema yet, owned by [`OWNER_ROLE`], starting the test cluster
    /// first if this is the first database of the process. Panics when there is no PostgreSQL to
    /// use.
    pub async fn empty() -> TestDatabase {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let server = server();
        let name = format!(
            "sutra_test_{}_{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let pool = server.pool.clone();
        let create = format!("CREATE DATABASE {name} OWNER {OWNER_ROLE}");
        server
            .run(async move { execute(&pool, create).await })
            .await
            .unwrap_or_else(|e| panic!("cannot create the test database {name}: {e}"));
        TestDatabase {
            url: server.url_of(&name, Some((ENGINE_ROLE, PASSWORD))),
            serving_url: server.url_of(&name, Some((SERVING_ROLE, PASSWORD))),
            system_url: server.url_of(&name, Some((SYSTEM_ROLE, PASSWORD))),
            owner_url: server.url_of(&name, Some((OWNER_ROLE, PASSWORD))),
            admin_url: server.url_of(&name, None),
            name,
        }
    }

    /// The URL the engine serves with: [`ENGINE_ROLE`] on this database, which does the
    /// system's work too.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The URL of a role that may act for tenants only, [`SERVING_ROLE`]: what an engine whose
    /// system work has a role of its own serves with.
    pub fn serving_url(&self) -> &str {
        &self.serving_url
    }

    /// The URL of a role that may act for the system only, [`SYSTEM_ROLE`]: what
    /// `sutra.store.system-url` takes beside [`TestDatabase::serving_url`].
    pub fn system_url(&self) -> &str {
        &self.system_url
    }

    /// The URL of the schema's owner, [`OWNER_ROLE`]: what `sutra db migrate` and
    /// `sutra.store.migrate-url` take.
    pub fn owner_url(&self) -> &str {
        &self.owner_url
    }

    /// The admin's URL on this database, for tests that must look past row-level security.
    pub fn admin_url(&self) -> &str {
        &self.admin_url
    }
}

impl Drop for TestDatabase {
    /// `WITH (FORCE)` ends the connections the test's pools still hold.
    fn drop(&mut self) {
        let server = server();
        let pool = server.pool.clone();
        let drop = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(e) = server.block_on(async move { execute(&pool, drop).await }) {
            eprintln!("could not drop the test database {}: {e}", self.name);
        }
    }
}

/// Runs `sql`, a query yielding one value (`SELECT count(*) …`, `SELECT (SELECT id … LIMIT 1)`
/// as an `Option`), on the database at `url` over a connection of its own. For checks of what
/// the API does not show — claims held, deliveries never taken; an admin URL sees past
/// row-level security. An error (the database is away) is the caller's to judge.
pub async fn scalar<T>(url: &str, sql: &str) -> sqlx::Result<T>
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
{
    let mut connection = PgConnection::connect(url).await?;
    let value = sqlx::query_scalar(AssertSqlSafe(sql.to_owned()))
        .fetch_one(&mut connection)
        .await?;
    let _ = connection.close().await;
    Ok(value)
}

async fn execute(pool: &PgPool, sql: String) -> sqlx::Result<()> {
    // Safe: the statements are made of constants and generated database names.
    sqlx::query(AssertSqlSafe(sql)).execute(pool).await?;
    Ok(())
}

/// The server test databases are made on, and an admin pool to it. The pool lives on a runtime
/// of its own: each `#[tokio::test]` has its own runtime, gone when the test ends, and a pool's
/// connections die with the runtime they were opened on.
struct Server {
    /// The admin URL, on the maintenance database.
    admin: Url,
    runtime: tokio::runtime::Runtime,
    pool: PgPool,
}

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(|| {
        let admin = match std::env::var(DATABASE_URL_VARIABLE) {
            Ok(url) => Url::parse(&url)
                .unwrap_or_else(|e| panic!("${DATABASE_URL_VARIABLE} is not a URL: {e}")),
            Err(_) => start_cluster(),
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("sutra-test-postgres")
            .enable_all()
            .build()
            .expect("a runtime for the test databases' admin");
        let pool = wait_for(&runtime, connect_admin(admin.clone()))
            .unwrap_or_else(|e| panic!("cannot connect to the test PostgreSQL at {admin}: {e}"));
        Server {
            admin,
            runtime,
            pool,
        }
    })
}

impl Server {
    /// Runs admin work on the admin runtime and awaits it from any other.
    async fn run<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> T {
        self.runtime
            .spawn(work)
            .await
            .expect("the admin task does not panic")
    }

    /// Runs admin work on the admin runtime and blocks until it is done: for `Drop`, which cannot
    /// await.
    fn block_on<T: Send + 'static>(&self, work: impl Future<Output = T> + Send + 'static) -> T {
        wait_for(&self.runtime, work)
    }

    /// The server's URL for `database`, as `login` (user, password) or as the admin.
    fn url_of(&self, database: &str, login: Option<(&str, &str)>) -> String {
        url_of(&self.admin, database, login)
    }
}

/// The URL of `database` on the server `admin` points at, as `login` (user, password) or as the
/// admin.
fn url_of(admin: &Url, database: &str, login: Option<(&str, &str)>) -> String {
    let mut url = admin.clone();
    url.set_path(database);
    if let Some((user, password)) = login {
        url.set_username(user).expect("a URL with a host");
        url.set_password(Some(password)).expect("a URL with a host");
    }
    url.to_string()
}

/// Runs `work` on `runtime` and blocks this thread until it is done. Unlike `Runtime::block_on`
/// this may be called from inside another runtime (a test's): the admin runtime's own thread does
/// the work, so blocking this one cannot deadlock.
fn wait_for<T: Send + 'static>(
    runtime: &tokio::runtime::Runtime,
    work: impl Future<Output = T> + Send + 'static,
) -> T {
    let (done, result) = std::sync::mpsc::channel();
    runtime.spawn(async move {
        let _ = done.send(work.await);
    });
    result.recv().expect("the admin task does not panic")
}

/// Connects as the admin (waiting for a cluster that is still starting) and makes sure the
/// owner's and the engine's roles exist, ordinary as they must be.
async fn connect_admin(admin: Url) -> sqlx::Result<PgPool> {
    let deadline = Instant::now() + STARTUP;
    loop {
        match PgConnection::connect(admin.as_str()).await {
            Ok(connection) => {
                connection.close().await?;
                break;
            }
            Err(e) if Instant::now() > deadline => return Err(e),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(admin.as_str())
        .await?;
    ensure_role(&pool, APP_GROUP, "NOLOGIN").await?;
    ensure_role(&pool, SYSTEM_GROUP, "NOLOGIN").await?;
    let login = format!("LOGIN PASSWORD '{PASSWORD}'");
    ensure_role(&pool, OWNER_ROLE, &login).await?;
    // The groups exist before any migration, so the owner needs no CREATEROLE to make them.
    for (role, groups) in [
        (ENGINE_ROLE, [APP_GROUP, SYSTEM_GROUP].as_slice()),
        (SERVING_ROLE, &[APP_GROUP]),
        (SYSTEM_ROLE, &[SYSTEM_GROUP]),
    ] {
        ensure_role(&pool, role, &login).await?;
        for group in groups {
            execute(&pool, format!("GRANT {group} TO {role}")).await?;
        }
        assert_acts_only_as_itself(&pool, role).await?;
    }
    let (serving_acts_as_system,): (bool,) = sqlx::query_as("SELECT pg_has_role($1, $2, 'USAGE')")
        .bind(SERVING_ROLE)
        .bind(SYSTEM_GROUP)
        .fetch_one(&pool)
        .await?;
    assert!(
        !serving_acts_as_system,
        "the role {SERVING_ROLE} may act as {SYSTEM_GROUP}: revoke that membership, or point \
         ${DATABASE_URL_VARIABLE} at another server"
    );
    Ok(pool)
}

/// Asserts that the login `role` may not act as [`OWNER_ROLE`], which owns the tables.
async fn assert_acts_only_as_itself(pool: &PgPool, role: &str) -> sqlx::Result<()> {
    let (acts_as_owner,): (bool,) = sqlx::query_as("SELECT pg_has_role($1, $2, 'MEMBER')")
        .bind(role)
        .bind(OWNER_ROLE)
        .fetch_one(pool)
        .await?;
    assert!(
        !acts_as_owner,
        "the role {role} may act as {OWNER_ROLE}, which owns the tables: revoke that \
         membership, or point ${DATABASE_URL_VARIABLE} at another server"
    );
    Ok(())
}

/// Creates `role` with `attributes` unless it exists, never a superuser nor BYPASSRLS. Another
/// test process may be creating it at the same moment; either creation is as good.
async fn ensure_role(pool: &PgPool, role: &str, attributes: &str) -> sqlx::Result<()> {
    let create = format!(
        "DO $$ BEGIN
             CREATE ROLE {role} {attributes} NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
         EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
         END $$"
    );
    execute(pool, create).await?;
    let (superuser, bypasses): (bool, bool) =
        sqlx::query_as("SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = $1")
            .bind(role)
            .fetch_one(pool)
            .await?;
    assert!(
        !superuser && !bypasses,
        "the role {role} exists but ignores row-level security (superuser or BYPASSRLS): \
         drop it, or point ${DATABASE_URL_VARIABLE} at another server"
    );
    Ok(())
}

/// Starts this process's throwaway cluster and returns its admin URL.
fn start_cluster() -> Url {
    let bin = binaries().unwrap_or_else(|| {
        panic!(
            "the tests need PostgreSQL: install its server (Debian: `apt-get install postgresql`), \
             or set ${DATABASE_URL_VARIABLE} to an admin URL of a server to use"
        )
    });
    let as_root = running_as_root();
    let dir = cluster_directory(as_root);
    init_cluster(as_root, &bin, &dir);
    let port = free_port();
    supervise(as_root, &bin.join("postgres"), &dir, port);
    admin_url(&dir, port)
}

/// `initdb` of a new cluster in `dir/data`: trust authentication, the `postgres` superuser.
fn init_cluster(as_root: bool, bin: &Path, dir: &Path) {
    let initdb = as_cluster_user(as_root, &bin.join("initdb"))
        .args(["--auth=trust", "--username=postgres", "--encoding=UTF8"])
        .args(["--no-sync", "--no-instructions", "-D"])
        .arg(dir.join("data"))
        .stdin(Stdio::null())
        .output()
        .expect("run initdb");
    assert!(
        initdb.status.success(),
        "initdb failed:\n{}",
        String::from_utf8_lossy(&initdb.stderr)
    );
}

/// The admin URL of a cluster listening on the unix socket in `dir` under `port`.
fn admin_url(dir: &Path, port: u16) -> Url {
    let mut url = Url::parse(&format!("postgres://postgres@localhost:{port}/postgres"))
        .expect("a well-formed URL");
    url.query_pairs_mut()
        .append_pair("host", &dir.display().to_string());
    url
}

/// The directory of the installed server binaries, if any.
fn binaries() -> Option<PathBuf> {
    let has_initdb = |dir: &Path| dir.join("initdb").is_file();
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| PathBuf::from(String::from_utf8_lossy(&output.stdout).trim()));
    if let Some(dir) = from_pg_config.filter(|dir| has_initdb(dir)) {
        return Some(dir);
    }
    // Debian installs each major version side by side; pg_config may belong to the client.
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .filter(|(_, bin)| has_initdb(bin))
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// `/proc/self` belongs to the process's effective user.
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|meta| meta.uid() == 0)
}

/// A new directory for the cluster, its socket and its log. As root it belongs to the `postgres`
/// user, in `/tmp` so that user can reach it whatever `TMPDIR` says.
fn cluster_directory(as_root: bool) -> PathBuf {
    let parent = if as_root {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let dir = parent.join(format!("sutra-pg-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("create the test cluster's directory");
    give_to_cluster_user(as_root, &dir);
    dir
}

/// Makes `path` the `postgres` OS user's when this process is root, as it must be for PostgreSQL
/// to use it; else it is already this process's user's.
fn give_to_cluster_user(as_root: bool, path: &Path) {
    if !as_root {
        return;
    }
    let status = Command::new("chown")
        .args(["postgres:postgres"])
        .arg(path)
        .status()
        .expect("run chown");
    assert!(
        status.success(),
        "running as root, the tests run PostgreSQL as the `postgres` user, which does not \
         exist here: install the server package (it creates the user)"
    );
}

/// `program`, run as the `postgres` OS user when this process is root (initdb and postgres
/// refuse to run as root), else as this process's user.
fn as_cluster_user(as_root: bool, program: &Path) -> Command {
    if !as_root {
        return Command::new(program);
    }
    if Path::new("/usr/sbin/runuser").exists() || Path::new("/sbin/runuser").exists() {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        let mut command = Command::new("su");
        command
            .args(["postgres", "-s", "/bin/sh", "-c", r#"exec "$0" "$@""#])
            .arg(program);
        command
    }
}

/// The cluster listens on a unix socket only, so the port merely names the socket file; a free
/// one keeps it recognisable next to any other server.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

/// Stops `postgres` (fast shutdown) and removes `$1` once the watched process (`$2`) or postgres
/// itself is gone. `/proc` tells whether a process lives even when it belongs to another user,
/// which `kill -0` cannot.
const SUPERVISOR: &str = r#"
dir=$1 watched=$2 postgres=$3 port=$4
"$postgres" -D "$dir/data" -k "$dir" -p "$port" -c listen_addresses= \
    -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300 \
    >"$dir/postgres.log" 2>&1 &
server=$!
alive() { if [ -d /proc/self ]; then [ -d "/proc/$1" ]; else kill -0 "$1" 2>/dev/null; fi; }
while alive "$watched" && alive "$server"; do sleep 0.2; done
kill -INT "$server" 2>/dev/null
wait "$server"
rm -rf "$dir"
"#;

/// Runs `script` (a supervising shell: `$1` the cluster's directory, `$2` this process's PID,
/// `$3` the postgres binary, `$4` the port) as the cluster's OS user, and reaps it when it
/// exits — after this process, or after the cluster it supervises.
pub(crate) fn spawn_supervisor(
    script: &str,
    name: &str,
    as_root: bool,
    postgres: &Path,
    dir: &Path,
    port: u16,
) {
    let mut command = as_cluster_user(as_root, Path::new("/bin/sh"));
    command
        .args(["-c", script, name])
        .arg(dir)
        .arg(std::process::id().to_string())
        .arg(postgres)
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut supervisor = command
        .spawn()
        .unwrap_or_else(|e| panic!("start the {name} supervisor: {e}"));
    std::thread::spawn(move || supervisor.wait());
}

/// Starts the cluster under a supervising shell that outlives neither this process nor the
/// cluster. Durability is off: the cluster is thrown away.
fn supervise(as_root: bool, postgres: &Path, dir: &Path, port: u16) {
    spawn_supervisor(
        SUPERVISOR,
        "sutra-test-postgres",
        as_root,
        postgres,
        dir,
        port,
    );
    let socket = dir.join(format!(".s.PGSQL.{port}"));
    let deadline = Instant::now() + STARTUP;
    while !socket.exists() {
        assert!(
            Instant::now() < deadline,
            "the test cluster did not start within {STARTUP:?}:\n{}",
            std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}
