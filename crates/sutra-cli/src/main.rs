//! The `sutra` command line.
//!
//! Each subcommand lives in its own module with its clap arguments and a `run` that returns the
//! process exit code: 0 success, 1 the command's subject is invalid (a deployment with errors),
//! 2 a usage error or an unreadable input (clap exits with 2 on its own usage errors).

mod check;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sutra", version, about = "Sutra, a durable process engine")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Validate deployment documents without a server.
    Check(check::Args),
    /// Run the engine and its HTTP API.
    Serve(serve::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check(args) => check::run(&args),
        Command::Serve(args) => serve::run(&args),
    }
}
