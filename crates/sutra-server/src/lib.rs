//! `sutra serve`: reads the configuration, opens the store, starts the engine and serves the
//! HTTP API until SIGINT or SIGTERM.
//!
//! This is the only crate that names concrete implementations (the SQLite store today); the
//! engine sees a `dyn Store`.

pub mod cloudevents;
pub mod config;
pub mod http;
pub mod problem;

use std::net::SocketAddr;
use std::sync::Arc;

use sutra_engine::{Engine, EngineConfig};
use sutra_store::Store;
use tracing::info;

use crate::config::Settings;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error(
        "refusing to listen on {0}: it is not a loopback address and no API tokens are configured (set sutra.auth.tokens, or listen on 127.0.0.1)"
    )]
    UnprotectedListen(SocketAddr),
    #[error("the datasource `{0}` is not supported yet: use sqlite://FILE or sqlite::memory:")]
    UnsupportedDatasource(String),
    #[error("cannot open the store at {url}: {reason}")]
    Store { url: String, reason: String },
    #[error("cannot start the engine: {0}")]
    Engine(#[from] sutra_engine::Error),
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
}

pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SUTRA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub async fn open_store(url: &str) -> Result<Arc<dyn Store>, ServeError> {
    if !url.starts_with("sqlite:") {
        return Err(ServeError::UnsupportedDatasource(url.to_owned()));
    }
    let store = sutra_store_sqlite::SqliteStore::open(url)
        .await
        .map_err(|e| ServeError::Store {
            url: url.to_owned(),
            reason: e.to_string(),
        })?;
    Ok(Arc::new(store))
}

pub fn engine_config(settings: &Settings) -> EngineConfig {
    EngineConfig {
        replica_id: settings.replica_id.clone(),
        lanes: settings.lanes,
        claim_timeout: settings.claim_timeout,
        sweep_interval: settings.sweep_interval,
        max_recoveries: settings.max_recoveries,
        deliveries_batch: settings.timers_batch,
        ..EngineConfig::default()
    }
}

/// Serves until a shutdown signal, then drains: the listener stops, in-flight requests finish,
/// the engine's lanes finish what they hold.
pub async fn serve(settings: Settings) -> Result<(), ServeError> {
    if !settings.listen.ip().is_loopback() && settings.auth_tokens.is_none() {
        return Err(ServeError::UnprotectedListen(settings.listen));
    }
    let store = open_store(&settings.datasource).await?;
    let engine = Engine::start(store, engine_config(&settings)).await?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|e| ServeError::Listen {
            addr: settings.listen,
            reason: e.to_string(),
        })?;
    let bound = listener.local_addr().map_err(|e| ServeError::Listen {
        addr: settings.listen,
        reason: e.to_string(),
    })?;
    let api = http::Api {
        engine: Arc::clone(&engine),
        max_bytes: settings.max_bytes,
    };
    // Tests and scripts wait for this exact line to learn the bound port.
    eprintln!(
        "sutra: listening on http://{bound} (replica {}, store {})",
        settings.replica_id, settings.datasource
    );
    info!(%bound, replica = %settings.replica_id, "serving");
    let served = axum::serve(listener, http::router(api))
        .with_graceful_shutdown(shutdown_signal())
        .await;
    engine.shutdown().await;
    served.map_err(|e| ServeError::Listen {
        addr: bound,
        reason: e.to_string(),
    })
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
