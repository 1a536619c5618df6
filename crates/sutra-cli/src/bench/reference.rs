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

use super::postgres::{Admin, redacted};
use crate::in_process::ScratchDir;

/// Rows the reference's UPDATE picks from at random.
const ROWS: u32 = 100_000;
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
    pub clients: usize,
    pub seconds: u64,
    /// The pgbench command line, the database's URL redacted.
    pub command: String,
}

/// Percentiles of the reference's transaction latencies.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub samples: usize,
}

/// Runs the reference for `seconds` at `clients` connections on a scratch database.
pub async fn measure(admin: &mut Admin, clients: usize, seconds: u64) -> Result<Reference, String> {
    let name = format!("sutra_bench_ref_{}", std::process::id());
    let url = admin.create_database(&name).await?;
    let measured = measure_on(&url, clients, seconds).await;
    let dropped = admin.drop_database(&name).await;
    let reference = measured?;
    dropped?;
    Ok(reference)
}

async fn measure_on(url: &str, clients: usize, seconds: u64) -> Result<Reference, String> {
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
