//! `sutra serve`: run the engine and its HTTP API.
//!
//! Configuration comes from defaults, then the config file, then `SUTRA_*` environment
//! variables, then these flags (SPEC §3).

use std::path::PathBuf;
use std::process::ExitCode;

use sutra_server::config::Sources;

#[derive(clap::Args)]
pub struct Args {
    /// Configuration file (default: ./sutra.yaml when it exists).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Datasource: sqlite://FILE (default sqlite://sutra.db), sqlite::memory: or postgres://….
    #[arg(long)]
    db: Option<String>,
    /// PostgreSQL: the URL to apply pending migrations through at start, as the role that owns
    /// the schema, where --db names a role that may only read and write rows
    /// (sutra.store.migrate-url).
    #[arg(long, value_name = "URL")]
    migrate_db: Option<String>,
    /// PostgreSQL: the URL of the store's cross-tenant work (sweep, timers, outbox, leases), as a
    /// member of sutra_system, where --db names a role that may act for tenants only
    /// (sutra.store.system-url).
    #[arg(long, value_name = "URL")]
    system_db: Option<String>,
    /// Address to listen on (default 127.0.0.1:7480; port 0 picks a free one).
    #[arg(long)]
    listen: Option<String>,
    /// Number of execution lanes (default 1).
    #[arg(long)]
    lanes: Option<String>,
    /// This process's replica id (default: hostname plus a random suffix).
    #[arg(long)]
    replica_id: Option<String>,
}

pub fn run(args: &Args) -> ExitCode {
    sutra_server::init_logging();
    let settings = match settings(args) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("sutra serve: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Intake evaluates a channel's `correlate` on these threads.
        .thread_stack_size(sutra_core::expr::EVALUATION_STACK_BYTES)
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sutra serve: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(sutra_server::serve(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sutra serve: {error}");
            ExitCode::FAILURE
        }
    }
}

fn settings(
    args: &Args,
) -> Result<sutra_server::config::Settings, sutra_server::config::ConfigError> {
    let default_file = PathBuf::from("sutra.yaml");
    let file = args
        .config
        .clone()
        .or_else(|| default_file.exists().then_some(default_file));
    let mut sources = Sources::defaults();
    if let Some(file) = file {
        sources = sources.file(&file)?;
    }
    sources
        .environment(std::env::vars())
        .flag("sutra.datasource", args.db.as_deref())
        .flag("sutra.store.migrate-url", args.migrate_db.as_deref())
        .flag("sutra.store.system-url", args.system_db.as_deref())
        .flag("sutra.listen", args.listen.as_deref())
        .flag("sutra.engine.lanes", args.lanes.as_deref())
        .flag("sutra.replica-id", args.replica_id.as_deref())
        .settings()
}
