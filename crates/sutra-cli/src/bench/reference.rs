//! The same-run reference of SPEC §9: how many one-row UPDATE + INSERT transactions per second
//! PostgreSQL itself commits at the bench's client count, measured with `pgbench` on a scratch
//! table in a scratch database, dropped afterwards.
//!
//! That transaction is the least a durable step can write: the instance's row changes, a
//! history row is added. The rows updated are spread over many ids, as instances are, so the
//! reference measures commits, not lock waits on one hot row.

use std::path::PathBuf;
use std::process::Command;

use serde::Serialize;
use sqlx::{Connection, PgConnection};

use super::postgres::{Admin, Connections, redacted};
use crate::in_process::ScratchDir;

/// Rows the reference's UPDATE picks from at random.
const ROWS: u32 = 100_000;
/// The connection pgbench opens for its own setup, beside its clients'.
const PGBENCH_SETUP: i64 = 1;
const SCRIPT: &str = "\\set id random(1, 100000)\n\
BEGIN;\n\
UPDATE bench_rows SET n = n + 1 WHERE id = :id;\n\
INSERT INTO bench_log (row_id) VALUES (:id);\n\
END;\n";

#[derive(Debug, Clone, Serialize)]
pub struct Reference {
    /// Committed transactions per second (pgbench's tps, initial connections excluded).
    pub commits_per_second: f64,
    /// Each transaction's latency, from pgbench's per-transaction log: what a step's latency
    /// is compared with (issue 11 asks for a step's p99 within 3 × a commit's).
    pub latency: Latency,
    /// pgbench's clients, each a connection: the bench's `--clients`, or fewer when the server
    /// has fewer to spare ([`Cap`]).
    pub clients: usize,
    /// Why the reference ran on fewer connections than `--clients`; absent when it did not.
    pub capped: Option<Cap>,
    pub seconds: u64,
    /// The pgbench command line, the database's URL redacted.
    pub command: String,
}

/// The server's connection limit, which capped the reference's clients at what it could spare:
/// `max_connections`, less those `reserved` for administrators, those `in_use` when it started
/// and those `kept_for_engine`, and one for pgbench's setup.
#[derive(Debug, Clone, Serialize)]
pub struct Cap {
    /// `--clients`: the connections the reference would have used.
    pub requested: usize,
    pub max_connections: i64,
    pub reserved: i64,
    pub in_use: i64,
    /// The most one engine of the bench's configuration opens (its pools and its listeners):
    /// a running server's may grow to it while the reference runs.
    pub kept_for_engine: usize,
}

/// Percentiles of the reference's transaction latencies.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples: usize,
}

/// Runs the reference for `seconds` at `clients` connections on a scratch database, or at as
/// many as the server can spare beside `engine` connections kept for the engine.
pub async fn measure(
    admin: &mut Admin,
    clients: usize,
    engine: usize,
    seconds: u64,
) -> Result<Reference, String> {
    let (clients, capped) = spare(clients, admin.connections().await?, engine)?;
    let name = format!("sutra_bench_ref_{}", std::process::id());
    let url = admin.create_database(&name).await?;
    let measured = measure_on(&url, clients, capped, seconds).await;
    let dropped = admin.drop_database(&name).await;
    let reference = measured?;
    dropped?;
    Ok(reference)
}

/// The reference's clients: `requested`, or what the server has to spare when that is fewer
/// (then with the [`Cap`] that says why). None to spare is an error: pgbench would be refused.
fn spare(
    requested: usize,
    server: Connections,
    engine: usize,
) -> Result<(usize, Option<Cap>), String> {
    let kept = i64::try_from(engine).unwrap_or(i64::MAX);
    let free = server.max - server.reserved - server.in_use - kept - PGBENCH_SETUP;
    let cap = Cap {
        requested,
        max_connections: server.max,
        reserved: server.reserved,
        in_use: server.in_use,
        kept_for_engine: engine,
    };
    match usize::try_from(free) {
        Ok(free) if free >= requested => Ok((requested, None)),
        Ok(free) if free > 0 => Ok((free, Some(cap))),
        _ => Err(format!(
            "PostgreSQL has no connection to spare for the pgbench reference: max_connections \
             {}, {} reserved for administrators, {} in use, {} kept for the engine, 1 for \
             pgbench's setup",
            cap.max_connections, cap.reserved, cap.in_use, cap.kept_for_engine
        )),
    }
}

async fn measure_on(
    url: &str,
    clients: usize,
    capped: Option<Cap>,
    seconds: u64,
) -> Result<Reference, String> {
    create_tables(url).await?;
    let scratch = ScratchDir::create("bench-reference")?;
    let script = scratch.file("update-insert.sql", SCRIPT)?;
    let threads = clients.min(std::thread::available_parallelism().map_or(1, usize::from));
    let log_prefix = scratch.path().join("transactions");
    let args = [
        "--no-vacuum".to_owned(),
        format!("--client={clients}"),
        format!("--jobs={threads}"),
        format!("--time={seconds}"),
        format!("--file={}", script.display()),
        "--log".to_owned(),
        format!("--log-prefix={}", log_prefix.display()),
    ];
    let pgbench = pgbench()?;
    // pgbench blocks for `seconds`: off the async threads, which run nothing else meanwhile but
    // must not be starved of a worker all the same.
    let run_args = args.clone();
    let (run_url, run_pgbench) = (url.to_owned(), pgbench.clone());
    let output = tokio::task::spawn_blocking(move || {
        Command::new(run_pgbench)
            .args(&run_args)
            .arg(&run_url)
            .output()
    })
    .await
    .map_err(|e| format!("pgbench did not finish: {e}"))?
    .map_err(|e| format!("cannot run {}: {e}", pgbench.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "pgbench failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(Reference {
        commits_per_second: tps(&stdout)
            .ok_or_else(|| format!("no tps in pgbench's output: {stdout}"))?,
        latency: logged_latency(scratch.path())?,
        clients,
        capped,
        seconds,
        command: format!("{} {} {}", pgbench.display(), args.join(" "), redacted(url)),
    })
}

async fn create_tables(url: &str) -> Result<(), String> {
    let mut connection = PgConnection::connect(url)
        .await
        .map_err(|e| format!("cannot connect to the reference database: {e}"))?;
    for statement in [
        "CREATE TABLE bench_rows (id integer PRIMARY KEY, n bigint NOT NULL DEFAULT 0)",
        "CREATE TABLE bench_log (id bigserial PRIMARY KEY, row_id integer NOT NULL, \
         at timestamptz NOT NULL DEFAULT now())",
    ] {
        sqlx::query(statement)
            .execute(&mut connection)
            .await
            .map_err(|e| format!("cannot create the reference tables: {e}"))?;
    }
    sqlx::query("INSERT INTO bench_rows (id) SELECT generate_series(1, $1)")
        .bind(i32::try_from(ROWS).unwrap_or(i32::MAX))
        .execute(&mut connection)
        .await
        .map_err(|e| format!("cannot fill the reference table: {e}"))?;
    let _ = connection.close().await;
    Ok(())
}

/// `pgbench` on the PATH, else the newest under `/usr/lib/postgresql/*/bin` (Debian's layout,
/// which keeps it off the PATH).
fn pgbench() -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH")
        .map(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("pgbench"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let mut versioned: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin/pgbench")))
        })
        .collect();
    versioned.sort();
    on_path
        .into_iter()
        .chain(versioned.into_iter().rev().map(|(_, path)| path))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            "pgbench is not installed (the postgresql-contrib or postgresql package has it)"
                .to_owned()
        })
}

/// The percentiles of every transaction pgbench logged (`--log`: one file per thread, a line
/// per transaction whose third field is its latency in microseconds).
fn logged_latency(dir: &std::path::Path) -> Result<Latency, String> {
    let unreadable = |e: std::io::Error| format!("cannot read pgbench's transaction log: {e}");
    let mut micros = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(unreadable)? {
        let path = entry.map_err(unreadable)?.path();
        let is_log = path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| name.starts_with("transactions."));
        if is_log {
            let text = std::fs::read_to_string(&path).map_err(unreadable)?;
            micros.extend(text.lines().filter_map(transaction_micros));
        }
    }
    micros.sort_unstable();
    let at = |quantile: f64| {
        let index = ((micros.len() as f64 * quantile).ceil() as usize).saturating_sub(1);
        micros.get(index).map_or(0.0, |us| *us as f64 / 1000.0)
    };
    Ok(Latency {
        p50_ms: at(0.50),
        p99_ms: at(0.99),
        samples: micros.len(),
    })
}

/// A transaction's latency in a pgbench log line: `client transaction latency_us script …`.
fn transaction_micros(line: &str) -> Option<u64> {
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The `tps = N (without initial connection time)` line of pgbench's report.
fn tps(report: &str) -> Option<f64> {
    report
        .lines()
        .find(|line| line.starts_with("tps = ") && line.contains("without initial connection"))?
        .strip_prefix("tps = ")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::{Connections, spare};

    const SERVER: Connections = Connections {
        max: 100,
        reserved: 3,
        in_use: 6,
    };

    #[test]
    fn the_reference_takes_its_clients_when_the_server_has_them() {
        let (clients, capped) = spare(16, SERVER, 12).unwrap();
        assert_eq!(clients, 16);
        assert!(capped.is_none());
    }

    #[test]
    fn the_reference_is_capped_at_what_the_server_can_spare() {
        let (clients, capped) = spare(128, SERVER, 12).unwrap();
        assert_eq!(clients, 100 - 3 - 6 - 12 - 1);
        let cap = capped.expect("capped");
        assert_eq!((cap.requested, cap.kept_for_engine), (128, 12));
    }

    #[test]
    fn a_server_with_nothing_to_spare_is_an_error_not_a_refused_pgbench() {
        let full = Connections {
            in_use: 90,
            ..SERVER
        };
        let error = spare(4, full, 12).unwrap_err();
        assert!(error.contains("no connection to spare"), "{error}");
    }

    #[test]
    fn tps_is_read_from_pgbench_report() {
        let report = "number of failed transactions: 0 (0.000%)\n\
                      latency average = 3.7 ms\n\
                      initial connection time = 12.3 ms\n\
                      tps = 4312.456789 (without initial connection time)\n";
        assert_eq!(super::tps(report), Some(4312.456789));
    }

    #[test]
    fn a_transactions_latency_is_the_third_field_of_its_log_line() {
        assert_eq!(
            super::transaction_micros("3 117 2410 0 1764590000 123456"),
            Some(2410)
        );
        assert_eq!(super::transaction_micros("garbage"), None);
    }
}
