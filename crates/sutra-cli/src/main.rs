//! The `sutra` command line.
//!
//! Each subcommand lives in its own module with its clap arguments and a `run`. Commands that
//! talk to a server go through `remote`, which owns the client, `--json`, and the exit codes:
//! 0 success; 1 the command's subject is invalid or the server refused it (a deployment with
//! errors, an unknown instance); 2 a usage error, an unreadable input, or no usable server
//! (clap exits with 2 on its own usage errors).

mod bench;
mod cancel;
mod check;
mod db;
mod demo;
mod deploy;
mod deployments;
mod in_process;
mod instances;
mod leases;
mod migrate;
mod output;
mod remote;
mod restore;
mod schedules;
mod send;
mod serve;
mod tasks;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Where the commands that talk to a server find it when `--server` is not given.
const DEFAULT_SERVER: &str = "http://127.0.0.1:7480";

#[derive(Parser)]
#[command(name = "sutra", version, about = "Sutra, a durable process engine")]
struct Cli {
    /// The server to talk to (every command but `check`, `serve` and `db`; default
    /// http://127.0.0.1:7480). `bench` runs an engine of its own unless this is given.
    #[arg(long, global = true, env = "SUTRA_SERVER", value_name = "URL")]
    server: Option<String>,
    /// The API token, sent as `Authorization: Bearer` (needed when the server has
    /// `sutra.auth.tokens`).
    #[arg(
        long,
        global = true,
        env = "SUTRA_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    token: Option<String>,
    /// Print JSON instead of text, for scripts and other tools.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the engine with the money-transfer example and a worker, and drive transfers through it.
    Demo(demo::Args),
    /// Drive a standard workload through an engine and report its throughput (SPEC §9).
    Bench(bench::Args),
    /// Validate deployment documents without a server.
    Check(check::Args),
    /// Run the engine and its HTTP API.
    Serve(serve::Args),
    /// Manage the store's database.
    #[command(subcommand)]
    Db(db::Command),
    /// Deploy a document to the server as the next version of its name.
    Deploy(deploy::Args),
    /// List the deployment versions, and show what keeps a draining one from retiring.
    #[command(subcommand)]
    Deployments(deployments::Command),
    /// Send a message (a CloudEvent) on an http channel.
    Send(send::Args),
    /// List and inspect instances.
    #[command(subcommand)]
    Instances(instances::Command),
    /// Bring a failed instance back to run its failed node again.
    Restore(remote::InstanceId),
    /// Move a suspended or failed instance onto another version of its deployment.
    Migrate(migrate::Args),
    /// Cancel a live instance.
    Cancel(remote::InstanceId),
    /// List external tasks.
    #[command(subcommand)]
    Tasks(tasks::Command),
    /// Show who leads which singleton role (timers, the sweep, the purger, singleton channels).
    Leases,
    /// List scheduled flows, and pause or resume one.
    #[command(subcommand)]
    Schedules(schedules::Command),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let server = &remote::Server {
        url: cli.server.as_deref().unwrap_or(DEFAULT_SERVER),
        token: cli.token.as_deref(),
    };
    let json = cli.json;
    match &cli.command {
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => bench::run(args, cli.server.as_deref(), cli.token.as_deref(), json),
        Command::Check(args) => check::run(args, json),
        Command::Serve(args) => serve::run(args),
        Command::Db(command) => db::run(command),
        Command::Deploy(args) => remote::run(server, json, |c| deploy::run(args, c)),
        Command::Send(args) => remote::run(server, json, |c| send::run(args, c)),
        Command::Instances(command) => remote::run(server, json, |c| instances::run(command, c)),
        Command::Restore(instance) => remote::run(server, json, |c| restore::run(instance, c)),
        Command::Cancel(instance) => remote::run(server, json, |c| cancel::run(instance, c)),
        Command::Tasks(command) => remote::run(server, json, |c| tasks::run(command, c)),
        Command::Leases => remote::run(server, json, leases::run),
        Command::Schedules(command) => remote::run(server, json, |c| schedules::run(command, c)),
        Command::Migrate(args) => remote::run(server, json, |c| migrate::run(args, c)),
        Command::Deployments(command) => {
            remote::run(server, json, |c| deployments::run(command, c))
        }
    }
}
