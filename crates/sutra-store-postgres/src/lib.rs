//! Sutra's production store: the store seam over one PostgreSQL database shared by every replica
//! (`sutra serve --db postgres://…`).
//!
//! [`PostgresStore`] is `sutra_store_sql`'s [`SqlStore`], whose scripts implement every area of
//! the seam once, over the statements of this crate: its SQL, its codec, its schema, its
//! transaction ([`statements::Scoped`]), and what PostgreSQL adds — the tenant's scope, advisory
//! locks, deployment and end notices. Each operation of the seam is one transaction, scoped to the tenant it acts for (see
//! [`scope`]): row-level security, enabled and forced on every table, shows it no other tenant's
//! rows. The claim, release, sweep and delivery updates are single conditional statements inside
//! it; a step's commit is one transaction led by its fenced update (see [`commit`]). Every "now"
//! is the database's clock, so that replicas never compare claims or locks across clocks. The
//! reasoning — concurrency, the clock, row-level security, timeouts — is in
//! docs/decisions/0015-postgres-store.md.
//!
//! One file per area of the seam, each with the statements of its area, each statement's SQL
//! beside the binding of its parameters: [`claim`] first, then
//! [`commit`], [`intake`], [`deliveries`], [`tasks`], [`outbox`], [`leases`], [`deployments`],
//! [`reads`], [`purge`] and [`schedules`]. Opening reads the URL's TLS settings as libpq's users
//! know them ([`tls`]; docs/decisions/0034-tls-to-postgresql.md), and a URL may name a primary
//! and its standbys, the store following the primary when one is promoted ([`failover`]).

mod claim;
mod codec;
mod columns;
mod commit;
mod deliveries;
mod deployments;
mod failover;
mod intake;
mod leases;
mod notices;
mod outbox;
mod plain;
mod purge;
mod reads;
mod scaling;
mod schedules;
mod schema;
mod scope;
mod statements;
mod tasks;
mod test_switches;
mod tls;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sutra_store::{Error, Result};
use sutra_store_sql::SqlStore;
use url::Url;

use crate::failover::Failover;
pub use crate::schema::CrossTenant;
use crate::schema::migrate_with;

/// How long a statement waits for a row or advisory lock. Steps hold their locks for
/// milliseconds; a wait this long means the holder is stuck (a frozen replica mid-transaction),
/// and the store refuses rather than waiting on another replica's timescale.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a session may sit idle inside a transaction before the server ends it, releasing its
/// locks. The store never idles in a transaction on purpose; a replica frozen (SIGSTOP) or
/// partitioned mid-transaction does, and must not hold rows forever.
const IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(10);

/// A pooled connection idle this long is pinged before it is used, and replaced if the ping
/// fails (the database restarted, a firewall dropped it). One busier than that is used at once:
/// a ping on every use costs a round trip per operation (about 30 µs, 7–25 % of an operation,
/// measured), and a connection that died while in use fails its operation as
/// [`Error::Unavailable`], which is retry-safe, and leaves the pool.
const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// How long an operation waits for a pooled connection before reporting the store unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a pooled connection lives before the pool closes it and opens another. A connection
/// keeps the plans of the statements it prepared, made for the tables as they were; PostgreSQL
/// remakes them when a table is analyzed, and on a server without autovacuum that is never, so
/// plans made while the tables were small — scans that cost more with every row — would last
/// as long as the connection. A new connection plans for the tables as they are (decision 0067:
/// 674 against 338 instances/s over a 40,000-instance run on a fresh database without
/// autovacuum). Reopening a connection every half minute costs a few milliseconds.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(30);

/// How [`open`] connects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    /// The most connections the pool opens.
    pub pool_size: u32,
    /// Whether to apply pending migrations at open. Turn off where the schema is migrated
    /// separately (`sutra db migrate`) by a role allowed to change it.
    pub migrate: bool,
    /// The URL to migrate through, as the role that owns the schema; `None`: the serving URL,
    /// which is enough when that role owns the schema or the schema is already current.
    pub migrate_url: Option<String>,
    /// The URL of the store's cross-tenant work (sweep, dispatch, outbox, leases, purge), as a
    /// member of `sutra_system`; `None`: the serving URL, whose role must then be one
    /// (docs/decisions/0040-a-role-for-cross-tenant-work.md).
    pub system_url: Option<String>,
    /// The `statement_timeout` of every transaction acting for a tenant — where every claim is
    /// taken: a lane's group, an administrative step — which the server sets to the claim
    /// timeout, so that no statement holds a claim (its transaction's row lock) longer than a
    /// claim lasts (docs/decisions/0048-a-steps-statements-bounded-by-the-claim-timeout.md).
    /// The system's work is not bounded by it. `None`: unbounded.
    pub step_statement_timeout: Option<Duration>,
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            pool_size: 10,
            migrate: true,
            migrate_url: None,
            system_url: None,
            step_statement_timeout: None,
        }
    }
}

/// The production store.
pub type PostgresStore = SqlStore<Postgres>;

/// The PostgreSQL backend: two pools of connections to one database — one for tenants' work, one
/// for the system's, each as its own role, or both one pool where one role does both — and the
/// listeners for deployment and end notices.
pub struct Postgres {
    pool: PgPool,
    system: PgPool,
    /// [`PostgresOptions::step_statement_timeout`].
    step_statement_timeout: Option<Duration>,
    deployments: notices::Notices,
    ended: notices::Notices,
    /// The failover watchers of a multi-host URL (tenants', and the system's when it has its
    /// own), stopped with the store.
    _watchers: Vec<failover::Watcher>,
}

/// Connects to `postgres://…` (or `postgresql://…`) with a pool of at most `options.pool_size`
/// connections, and brings the schema up to date unless told not to. Connections are opened
/// lazily, as work needs them, and reopened after the database comes back; each connection
/// prepares and caches the statements it runs.
pub async fn open(url: &str, options: &PostgresOptions) -> Result<PostgresStore> {
    let tenants = failover::primary(url).await?;
    if options.migrate {
        match &options.migrate_url {
            Some(owner) => migrate(owner).await?,
            None => migrate_with(&tenants.connect).await?,
        }
    }
    let connect = tenants.connect.clone();
    let switches = tenants.failover();
    let deployments = notices::Notices::new(connect.clone(), notices::DEPLOYMENTS, &switches);
    let ended = notices::Notices::new(connect.clone(), notices::ENDED, &switches);
    let pool = pool_of(connect, options.pool_size, switches);
    let notice_pools = [deployments.pool(), ended.pool()].map(|pool| (pool, as_given as Dress));
    let mut watchers = Vec::new();
    watchers.extend(
        tenants.watch(
            [(pool.clone(), session as Dress)]
                .into_iter()
                .chain(notice_pools)
                .collect(),
        ),
    );
    let system = match &options.system_url {
        Some(url) => {
            let system = failover::primary(url).await?;
            let pool = pool_of(system.connect.clone(), options.pool_size, system.failover());
            watchers.extend(system.watch(vec![(pool.clone(), session as Dress)]));
            pool
        }
        None => pool.clone(),
    };
    Ok(SqlStore::new(Postgres {
        pool,
        system,
        step_statement_timeout: options.step_statement_timeout,
        deployments,
        ended,
        _watchers: watchers,
    }))
}

/// How a pool dresses a host's connect options (see [`failover::Target`]).
type Dress = fn(PgConnectOptions) -> PgConnectOptions;

fn as_given(connect: PgConnectOptions) -> PgConnectOptions {
    connect
}

/// The store's session settings on every connection of its pools.
fn session(connect: PgConnectOptions) -> PgConnectOptions {
    connect.options([
        ("lock_timeout", millis(LOCK_TIMEOUT)),
        (
            "idle_in_transaction_session_timeout",
            millis(IDLE_IN_TRANSACTION_TIMEOUT),
        ),
    ])
}

/// A pool of at most `size` connections as `connect` says, each with the store's session
/// settings. The system's pool is as large as the tenants' because due deliveries are read in
/// it on the hot path; its connections open only when work needs them. After a failover
/// (`switches`) a connection opened before it is discarded rather than used.
fn pool_of(connect: PgConnectOptions, size: u32, switches: Option<Arc<Failover>>) -> PgPool {
    PgPoolOptions::new()
        .max_connections(size)
        .max_lifetime(CONNECTION_LIFETIME)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .before_acquire(move |connection, metadata| {
            let stale = (switches.as_ref()).is_some_and(|f| f.predates_switch(metadata.age));
            Box::pin(async move {
                if stale {
                    return Ok(false);
                }
                if metadata.idle_for >= PING_AFTER_IDLE {
                    connection.ping().await?;
                }
                Ok(true)
            })
        })
        .connect_lazy_with(session(connect))
}

/// Applies every pending migration to the database at `url` (`sutra db migrate`). Safe to run
/// from many replicas at once: sqlx serializes migrators with an advisory lock, and applied
/// migrations are skipped.
pub async fn migrate(url: &str) -> Result<()> {
    migrate_with(&failover::primary(url).await?.connect).await
}

/// Why row-level security would not bind a replica serving as the role of `url`, if it would not
/// (a superuser, BYPASSRLS, or the tables' owner); empty for an ordinary serving role.
pub async fn row_security_gaps(url: &str) -> Result<Vec<String>> {
    schema::row_security_gaps(&failover::primary(url).await?.connect).await
}

/// Whether the server at `url` runs autovacuum (see [`schema::autovacuum_runs`]).
pub async fn autovacuum_runs(url: &str) -> Result<bool> {
    schema::autovacuum_runs(&failover::primary(url).await?.connect).await
}

/// Whether the role of `url` may act for the system, `'*'` (see [`CrossTenant`]).
pub async fn cross_tenant(url: &str) -> Result<CrossTenant> {
    schema::cross_tenant(&failover::primary(url).await?.connect).await
}

fn connect_options(url: &str) -> Result<PgConnectOptions> {
    // sqlx reads any URL's host, port and path, whatever its scheme.
    if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
        return Err(Error::Unavailable(
            "not a PostgreSQL URL: it must start with postgres:// or postgresql://".to_owned(),
        ));
    }
    let not_postgres =
        |e: &dyn std::fmt::Display| Error::Unavailable(format!("not a PostgreSQL URL: {e}"));
    let parsed = Url::parse(url).map_err(|e| not_postgres(&e))?;
    // Checked before sqlx parses the URL, so that a bad sslmode is told in libpq's words.
    let tls = tls::settings(&parsed, |variable| std::env::var(variable).ok())?;
    let options = PgConnectOptions::from_str(url).map_err(|e| not_postgres(&e))?;
    let options = tls.apply(options);
    // Named in pg_stat_activity, unless the URL names it otherwise.
    Ok(match options.get_application_name() {
        Some(_) => options,
        None => options.application_name("sutra"),
    })
}

/// SQLSTATE class of a login the server refused: no `pg_hba.conf` line for it (one asking for
/// TLS, say), a wrong password.
const LOGIN_REFUSED: &str = "28";

/// An error connecting at the start, saying what to check. sqlx reports a server certificate
/// rustls refused (`UnknownIssuer`, `NotValidForName`) as an I/O error, which names neither the
/// certificate nor the settings that judged it; and a refused login is the URL's or the
/// server's configuration, not the store's data, which [`codec::db`] would call it.
pub(crate) fn connect_error(error: sqlx::Error) -> Error {
    let certificate_refused = match &error {
        sqlx::Error::Io(e) => e.get_ref().and_then(|e| e.downcast_ref::<rustls::Error>()),
        sqlx::Error::Tls(e) => e.downcast_ref::<rustls::Error>(),
        _ => None,
    };
    if let Some(rustls::Error::InvalidCertificate(reason)) = certificate_refused {
        return Error::Unavailable(format!(
            "PostgreSQL's TLS certificate was refused ({reason:?}): it must be signed by a \
             certificate authority of the URL's sslrootcert or of the platform's roots, and with \
             sslmode=verify-full name the host the URL connects to"
        ));
    }
    match &error {
        sqlx::Error::Database(e)
            if e.code().is_some_and(|code| code.starts_with(LOGIN_REFUSED)) =>
        {
            Error::Unavailable(format!(
                "PostgreSQL refused the login: {e}; check the URL's user, password and sslmode \
                 against the server's pg_hba.conf"
            ))
        }
        _ => codec::db(error),
    }
}

fn millis(duration: Duration) -> String {
    format!("{}ms", duration.as_millis())
}
