//! `sutra serve`: reads the configuration, opens the store, starts the engine and serves the
//! HTTP API until SIGINT or SIGTERM.
//!
//! This is the only crate that names concrete implementations (the stores and the transports);
//! the engine sees a `dyn Store` and a `dyn Sender`, and the broker consumers see intake as a
//! `dyn Receiver` ([`consumers`]).

pub mod auth;
pub mod cloudevents;
pub mod config;
pub mod connections;
pub mod console;
pub mod consumers;
mod graph;
pub mod http;
pub mod metrics;
pub mod openapi;
pub mod problem;
mod render;
pub mod tokens;

use std::net::SocketAddr;
use std::sync::Arc;

use sutra_engine::Engine;
use sutra_store::{Clock, Store};
use tracing::{info, warn};

use crate::config::Settings;
use crate::tokens::Keyring;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(
        "refusing to listen on {0}: it is not a loopback address and no API tokens are configured (set sutra.auth.tokens, or listen on 127.0.0.1)"
    )]
    UnprotectedListen(SocketAddr),
    #[error(
        "the datasource `{0}` is not supported: use sqlite://FILE, sqlite::memory: or postgres://…"
    )]
    UnsupportedDatasource(String),
    #[error("cannot open the store at {url}: {reason}")]
    Store { url: String, reason: String },
    #[error("cannot start the engine: {0}")]
    Engine(#[from] sutra_engine::Error),
    #[error("cannot set up the outbound transports: {0}")]
    Transports(String),
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
}

/// Logging as `SUTRA_LOG` says (default `info`). The history log (`sutra::history`, decision
/// 0043) is off unless the filter names it: `SUTRA_LOG=info` alone does not turn it on.
pub fn init_logging() {
    let directives = log_directives(std::env::var("SUTRA_LOG").ok().as_deref());
    let filter = tracing_subscriber::EnvFilter::try_new(&directives)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_directives(None)));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// The filter's directives: `SUTRA_LOG` (else `info`), with the history log turned off unless
/// it names [`sutra_engine::history_log::TARGET`].
fn log_directives(configured: Option<&str>) -> String {
    let configured = configured
        .filter(|c| !c.trim().is_empty())
        .unwrap_or("info");
    if configured.contains(sutra_engine::history_log::TARGET) {
        configured.to_owned()
    } else {
        format!("{configured},{}=off", sutra_engine::history_log::TARGET)
    }
}

/// The store implementations, told apart by the datasource's scheme.
enum Datasource {
    Sqlite,
    Postgres,
}

impl Datasource {
    fn of(url: &str) -> Result<Datasource, ServeError> {
        if url.starts_with("sqlite:") {
            Ok(Datasource::Sqlite)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Datasource::Postgres)
        } else {
            Err(ServeError::UnsupportedDatasource(redacted(url)))
        }
    }
}

/// Opens the store `settings.datasource` names: SQLite for `sqlite:`, reading its times from
/// `clock`, PostgreSQL for `postgres://` or `postgresql://` (with its pool size, migrating unless
/// told not to; it reads the database's clock).
pub async fn open_store(settings: &Settings, clock: &Clock) -> Result<Arc<dyn Store>, ServeError> {
    let url = settings.datasource.as_str();
    let store: Arc<dyn Store> = match Datasource::of(url)? {
        Datasource::Sqlite => Arc::new(
            sutra_store_sqlite::open_with(url, clock.clone())
                .await
                .map_err(|e| store_error(url, e))?,
        ),
        Datasource::Postgres => {
            let options = sutra_store_postgres::PostgresOptions {
                pool_size: settings.store_pool_size,
                migrate: settings.store_migrate,
                migrate_url: settings.store_migrate_url.clone(),
                system_url: settings.store_system_url.clone(),
                // No statement of a step outlasts its claim (decision 0048).
                step_statement_timeout: Some(settings.engine.claim_timeout.unsigned_abs()),
            };
            let store = sutra_store_postgres::open(url, &options)
                .await
                .map_err(|e| store_error(url, e))?;
            warn_of_row_security_gaps(url).await;
            warn_unless_autovacuum_runs(url).await;
            if let Some(system) = &options.system_url {
                warn_of_row_security_gaps(system).await;
            }
            check_cross_tenant_roles(url, options.system_url.as_deref()).await?;
            Arc::new(store)
        }
    };
    Ok(store)
}

/// Tenant isolation rests on row-level security only when the serving role is held by it. A role
/// that is not still works (a developer's superuser, a role that owns the tables), so it is
/// reported rather than refused; docs/decisions/0019 says how to set up the roles.
async fn warn_of_row_security_gaps(url: &str) {
    match sutra_store_postgres::row_security_gaps(url).await {
        Ok(gaps) => {
            for gap in gaps {
                warn!(
                    "row-level security does not bind this replica: {gap}; serve as a member of \
                     sutra_app that owns nothing (docs/decisions/0019-tenancy-and-tokens.md)"
                );
            }
        }
        Err(error) => warn!(%error, "cannot tell whether row-level security binds this replica"),
    }
}

/// A server without autovacuum never analyzes the engine's tables, so their statements are
/// planned without statistics — until decision 0067's 30-second connections, the plans made
/// while the tables were young were kept for good — and their dead rows are never vacuumed:
/// reported, since the setting is the server's.
async fn warn_unless_autovacuum_runs(url: &str) {
    match sutra_store_postgres::autovacuum_runs(url).await {
        Ok(true) => {}
        Ok(false) => warn!(
            "autovacuum is off on this PostgreSQL server: nothing analyzes the engine's tables, \
             so its statements are planned without statistics and run slower as the tables \
             grow, and nothing vacuums their dead rows; turn autovacuum on, or run ANALYZE and \
             VACUUM on the engine's database yourself"
        ),
        Err(error) => warn!(%error, "cannot tell whether the server runs autovacuum"),
    }
}

/// The store's cross-tenant work needs a role `'*'` shows rows to (decision 0040): the system URL's,
/// else the serving one's. Without one, the replica would run but never sweep, fire a timer,
/// send an outbox row or take a lease — so it refuses to start. A serving role that may act for
/// the system works, and is reported: its credentials read every tenant's rows.
async fn check_cross_tenant_roles(url: &str, system: Option<&str>) -> Result<(), ServeError> {
    use sutra_store_postgres::{CrossTenant, cross_tenant};
    let serving = cross_tenant(url).await;
    let own = match system {
        Some(system) => Some(cross_tenant(system).await),
        None => None,
    };
    match own.as_ref().unwrap_or(&serving) {
        Ok(CrossTenant::Refused) => {
            let (acting, fix) = match system {
                Some(system) => (
                    system,
                    "GRANT sutra_system TO its role, or set sutra.store.system-url to a URL of \
                     a member",
                ),
                None => (
                    url,
                    "set sutra.store.system-url (--system-db) to a URL of a member of \
                     sutra_system, or GRANT sutra_system TO the serving role",
                ),
            };
            return Err(ServeError::Store {
                url: redacted(acting),
                reason: format!(
                    "its role is not a member of sutra_system, so the store's cross-tenant work \
                     (sweep, timers, outbox, leases, purge) would see no rows: {fix} \
                     (docs/decisions/0040-a-role-for-cross-tenant-work.md)"
                ),
            });
        }
        Err(error) => {
            warn!(%error, "cannot tell whether the store's cross-tenant work may act for the system");
        }
        Ok(_) => {}
    }
    if matches!(serving, Ok(CrossTenant::Member)) {
        warn!(
            "the serving role is a member of sutra_system, so its credentials read every \
             tenant's rows: serve as a role in sutra_app alone, with sutra.store.system-url for \
             the system's work (docs/decisions/0040-a-role-for-cross-tenant-work.md)"
        );
    }
    Ok(())
}

/// Brings the schema of the store at `url` up to date (`sutra db migrate`). SQLite migrates
/// whenever it is opened, so opening it is enough.
pub async fn migrate_store(url: &str) -> Result<(), ServeError> {
    match Datasource::of(url)? {
        Datasource::Sqlite => {
            let store = sutra_store_sqlite::open(url)
                .await
                .map_err(|e| store_error(url, e))?;
            store.backend().close().await;
            Ok(())
        }
        Datasource::Postgres => sutra_store_postgres::migrate(url)
            .await
            .map_err(|e| store_error(url, e)),
    }
}

fn store_error(url: &str, error: sutra_store::Error) -> ServeError {
    ServeError::Store {
        url: redacted(url),
        reason: error.to_string(),
    }
}

/// The datasource as it may be shown in logs and errors: without its password, whether in the
/// login (`user:password@`) or, as libpq also takes it, in a `password` parameter.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((login, host)) if login.contains(':') => {
            let user = login.split_once(':').map_or(login, |(user, _)| user);
            format!("{user}:***@{host}")
        }
        _ => authority.to_owned(),
    };
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<&str> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some(("password", _)) => "password=***",
                    _ => pair,
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
}

/// Serves until SIGINT or SIGTERM, announcing the bound address on stderr.
pub async fn serve(settings: Settings) -> Result<(), ServeError> {
    let replica = settings.engine.replica_id.clone();
    let store = redacted(&settings.datasource);
    let engine = settings.engine.clone();
    let http = settings.http;
    serve_until(settings, shutdown_signal(), |bound| {
        // Tests and scripts wait for this exact line to learn the bound port.
        eprintln!("sutra: listening on http://{bound} (replica {replica}, store {store})");
        // The timings recovery and leadership run on, as in force: what the operator reads to
        // know what a defaulted or overridden key came to (crates/sutra-cli/tests/defaults.rs).
        info!(
            %bound,
            %replica,
            lanes = engine.lanes,
            claim_timeout = %engine.claim_timeout,
            sweep_interval = %engine.sweep_interval,
            lease_ttl = %engine.lease_ttl,
            lease_poll = %engine.lease_poll,
            header_timeout = %http.header_timeout,
            idle_timeout = %http.idle_timeout,
            body_timeout = %http.body_timeout,
            max_connections = http.max_connections,
            "serving"
        );
    })
    .await
}

/// Serves until `shutdown` completes, then drains: the listener stops, waiting long-polls
/// answer, in-flight requests finish, the engine's lanes finish what they hold. `listening` is
/// told the bound address once requests can be sent (port 0 picks a free one).
pub async fn serve_until(
    settings: Settings,
    shutdown: impl Future<Output = ()> + Send + 'static,
    listening: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    if !settings.listen.ip().is_loopback() && settings.auth_tokens.is_none() {
        return Err(ServeError::UnprotectedListen(settings.listen));
    }
    metrics::install();
    // The one clock of the process: the engine and the embedded store read and wait on it.
    let clock = Clock::system();
    let store = open_store(&settings, &clock).await?;
    let transports = sutra_transport::Transports::new(
        settings.brokers.clone(),
        settings.webhook_roots.as_deref(),
    )
    .map_err(ServeError::Transports)?;
    let engine = Engine::start(
        store,
        settings.engine.clone(),
        Arc::new(transports),
        clock.clone(),
    )
    .await?;
    let listen_error = |reason: std::io::Error| ServeError::Listen {
        addr: settings.listen,
        reason: reason.to_string(),
    };
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(listen_error)?;
    let bound = listener.local_addr().map_err(listen_error)?;
    announce_tokens(&settings);
    let keyring = keyring(&settings);
    let reloading = keyring
        .clone()
        .map(|keyring| tokio::spawn(reload_tokens(keyring, clock)));
    let consumers =
        consumers::Consumers::spawn(&engine, settings.brokers.clone(), settings.max_bytes);
    let api = http::Api {
        engine: Arc::clone(&engine),
        max_bytes: settings.max_bytes,
        tokens: keyring.clone(),
        consumers: consumers.health(),
    };
    listening(bound);
    let draining = Arc::clone(&engine);
    connections::serve(listener, http::router(api), settings.http, async move {
        shutdown.await;
        // What the consumers hold goes back to the brokers, for other replicas to take.
        consumers.stop().await;
        // The drain waits for every in-flight request; a long-poll would hold it for its wait.
        draining.end_polls();
        // Other replicas take the roles at their next poll, not after the lease's TTL.
        draining.resign().await;
    })
    .await;
    engine.shutdown().await;
    if let Some(reloading) = reloading {
        reloading.abort();
    }
    Ok(())
}

/// The tokens requests are checked against, if any: from a file, read again as it changes.
fn keyring(settings: &Settings) -> Option<Arc<Keyring>> {
    let tokens = settings.auth_tokens.clone()?;
    Some(Arc::new(match &settings.auth_tokens_file {
        Some(path) => Keyring::from_file(tokens, path.clone()),
        None => Keyring::fixed(tokens),
    }))
}

/// How often the tokens' file is looked at for a change.
const TOKENS_LOOK_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// Reads the tokens' file again when it changes, and at once on SIGHUP. Says whom the tokens
/// now act for, or why the file was not taken; never what it holds.
async fn reload_tokens(keyring: Arc<Keyring>, clock: Clock) {
    if keyring.file().is_none() {
        return;
    }
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    loop {
        let hangup = async {
            match hangups.as_mut() {
                Some(hangups) => {
                    hangups.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        let always = tokio::select! {
            () = hangup => true,
            () = clock.sleep(TOKENS_LOOK_EVERY) => false,
        };
        match keyring.reload(always) {
            Ok(Some(tenants)) => info!(?tenants, "API tokens reloaded"),
            Ok(None) => {}
            Err(reason) => warn!(%reason, "API tokens not reloaded; the tokens in force stay"),
        }
    }
}

/// Says whom requests may act for; never a token.
fn announce_tokens(settings: &Settings) {
    match &settings.auth_tokens {
        Some(tokens) => info!(
            tenants = ?tokens.tenants(),
            operator = tokens.operator(),
            "API tokens required"
        ),
        None => info!("no API tokens: every request acts for tenant `default` with every role"),
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
    info!("shutting down");
}

#[cfg(test)]
mod tests {
    use super::redacted;

    #[test]
    fn a_datasource_is_shown_without_its_password() {
        assert_eq!(
            redacted("postgres://sutra:s3cr@t@db:5432/sutra?sslmode=require"),
            "postgres://sutra:***@db:5432/sutra?sslmode=require"
        );
        assert_eq!(
            redacted("postgres://db/sutra?user=sutra&password=s3cr%26t&sslmode=verify-full"),
            "postgres://db/sutra?user=sutra&password=***&sslmode=verify-full"
        );
        for shown_as_is in [
            "postgres://sutra@db/sutra",
            "postgres:///sutra?host=/run/postgresql",
            "sqlite://sutra.db",
            "sqlite::memory:",
        ] {
            assert_eq!(redacted(shown_as_is), shown_as_is);
        }
    }
}
