//! `sutra db migrate --db URL`: applies the store's pending schema migrations and exits, for
//! deployments that migrate as a step of their own (with `sutra.store.migrate: false` on the
//! replicas) rather than at every replica's start. Running it again changes nothing.

use std::process::ExitCode;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Apply pending schema migrations to a store.
    Migrate(MigrateArgs),
}

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// Datasource: postgres://… (or sqlite://FILE).
    #[arg(long, env = "SUTRA_DATASOURCE", value_name = "URL")]
    db: String,
}

pub fn run(command: &Command) -> ExitCode {
    match command {
        Command::Migrate(args) => migrate(args),
    }
}

fn migrate(args: &MigrateArgs) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sutra db migrate: cannot start the async runtime: {error}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(sutra_server::migrate_store(&args.db)) {
        Ok(()) => {
            println!(
                "the schema of {} is up to date",
                sutra_server::redacted(&args.db)
            );
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("sutra db migrate: {error}");
            ExitCode::FAILURE
        }
    }
}
