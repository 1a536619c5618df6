//! The bench's PostgreSQL side: scratch databases made for one run and dropped after it, and
//! the counters a run is measured by: the server's commit counter
//! (`pg_stat_database.xact_commit`), its WAL position (`pg_current_wal_lsn()`), and the engine's
//! database's table statistics (`pg_stat_user_tables`: updates, heap-only ones, inserts).
//!
//! `--db` is an admin URL (a role that may create databases, as `postgres` on 127.0.0.1): the
//! bench creates its databases through it and serves the in-process engine on one of them as
//! that role, which also applies the schema. Row-level security does not bind such a role
//! (docs/decisions/0019); that changes no write the engine makes, so it does not change what
//! is measured.

use sqlx::{AssertSqlSafe, Connection, PgConnection};

/// An admin connection to the server `--db` names.
pub struct Admin {
    url: String,
    connection: PgConnection,
}

impl Admin {
    pub async fn connect(url: &str) -> Result<Admin, String> {
        let connection = PgConnection::connect(url)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", redacted(url)))?;
        Ok(Admin {
            url: url.to_owned(),
            connection,
        })
    }

    /// Creates the database `name`; [`Admin::drop_database`] removes it.
    pub async fn create_database(&mut self, name: &str) -> Result<String, String> {
        // Safe: `name` is made by the bench of a prefix and the process id.
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut self.connection)
            .await
            .map_err(|e| format!("cannot create the scratch database {name}: {e}"))?;
        Ok(with_database(&self.url, name))
    }

    /// `WITH (FORCE)` ends connections still open on it, such as a pool dropped a moment ago.
    pub async fn drop_database(&mut self, name: &str) -> Result<(), String> {
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut self.connection)
        .await
        .map(drop)
        .map_err(|e| format!("cannot drop the scratch database {name}: {e}"))
    }

    /// How many client connections the server takes, how many it keeps for administrators
    /// (`superuser_reserved_connections`, and `reserved_connections` from PostgreSQL 16 on) and
    /// how many are open now, this one among them.
    pub async fn connections(&mut self) -> Result<Connections, String> {
        let (max, reserved, in_use): (i64, i64, i64) = sqlx::query_as(
            "SELECT current_setting('max_connections')::bigint,
                    current_setting('superuser_reserved_connections')::bigint
                      + COALESCE(current_setting('reserved_connections', true)::bigint, 0),
                    (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')",
        )
        .fetch_one(&mut self.connection)
        .await
        .map_err(|e| format!("cannot read the server's connection limit: {e}"))?;
        Ok(Connections {
            max,
            reserved,
            in_use,
        })
    }

    /// The counters of database `name` (reached at `url`) now: its commits and its tables'
    /// writes as far as the statistics have been told (a backend reports its counts at most
    /// once a second while busy, and at the latest when it disconnects), and the cluster's WAL
    /// position.
    pub async fn mark(&mut self, name: &str, url: &str) -> Result<Mark, String> {
        let (commits, wal): (i64, i64) = sqlx::query_as(
            "SELECT xact_commit, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint
             FROM pg_stat_database WHERE datname = $1",
        )
        .bind(name)
        .fetch_one(&mut self.connection)
        .await
        .map_err(|e| format!("cannot read the commit counter of {name}: {e}"))?;
        // The table statistics are the database's own: read through a connection to it.
        let mut connection = PgConnection::connect(url)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", redacted(url)))?;
        let tables = sqlx::query_as(TABLES)
            .fetch_one(&mut connection)
            .await
            .map_err(|e| format!("cannot read the table statistics of {name}: {e}"));
        let statements = statements(&mut connection)
            .await
            .map_err(|e| format!("cannot read pg_stat_statements for {name}: {e}"));
        let _ = connection.close().await;
        let (updates, hot_updates, index_entries) = tables?;
        Ok(Mark {
            commits,
            wal,
            updates,
            hot_updates,
            index_entries,
            statements: statements?,
        })
    }
}

/// The server's client connections: its limit, those kept for administrators, those open.
#[derive(Debug, Clone, Copy)]
pub struct Connections {
    pub max: i64,
    pub reserved: i64,
    pub in_use: i64,
}

/// Σ updates, Σ heap-only updates, and Σ over tables of the rows that wrote an entry into each
/// of the table's indexes (inserts and updates that were not heap-only) × its indexes. An
/// estimate of the index entries written: a partial index gets an entry only for the rows its
/// predicate holds, and a deleted row writes none.
const TABLES: &str = "SELECT COALESCE(SUM(n_tup_upd), 0)::bigint,
        COALESCE(SUM(n_tup_hot_upd), 0)::bigint,
        COALESCE(SUM((n_tup_ins + n_tup_upd - n_tup_hot_upd)
            * (SELECT COUNT(*) FROM pg_index x WHERE x.indrelid = s.relid)), 0)::bigint
    FROM pg_stat_user_tables s";

/// The statements run in the connection's database so far, as `pg_stat_statements` counts
/// them, where the server loads it (`shared_preload_libraries`; it cannot be loaded later). The
/// extension is created in that database — the bench's scratch one — to read its view.
async fn statements(connection: &mut PgConnection) -> sqlx::Result<Option<Statements>> {
    let loaded: bool = sqlx::query_scalar(
        "SELECT 'pg_stat_statements' = ANY(string_to_array(
             replace(current_setting('shared_preload_libraries'), ' ', ''), ','))",
    )
    .fetch_one(&mut *connection)
    .await?;
    if !loaded {
        return Ok(None);
    }
    sqlx::query("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .execute(&mut *connection)
        .await?;
    let (calls, plans, exec_ms, plan_ms) = sqlx::query_as(
        "SELECT COALESCE(SUM(calls), 0)::bigint, COALESCE(SUM(plans), 0)::bigint,
                COALESCE(SUM(total_exec_time), 0)::float8, COALESCE(SUM(total_plan_time), 0)::float8
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_one(&mut *connection)
    .await?;
    Ok(Some(Statements {
        calls,
        plans,
        exec_ms,
        plan_ms,
    }))
}

/// `pg_stat_statements`' sums over one database: statements run (`BEGIN` and `COMMIT` among
/// them; nested ones, such as foreign-key checks, only with `pg_stat_statements.track = all`),
/// plans made (counted only with `pg_stat_statements.track_planning`), and the milliseconds
/// spent executing and planning them.
#[derive(Debug, Clone, Copy)]
pub struct Statements {
    pub calls: i64,
    pub plans: i64,
    pub exec_ms: f64,
    pub plan_ms: f64,
}

impl Statements {
    fn until(self, later: Statements) -> Statements {
        Statements {
            calls: later.calls - self.calls,
            plans: later.plans - self.plans,
            exec_ms: later.exec_ms - self.exec_ms,
            plan_ms: later.plan_ms - self.plan_ms,
        }
    }
}

/// The counters at one moment; [`Mark::until`] a later one is what happened in between.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    commits: i64,
    /// Bytes of WAL the cluster has written since its start.
    wal: i64,
    updates: i64,
    hot_updates: i64,
    index_entries: i64,
    statements: Option<Statements>,
}

/// What the server did between two marks.
#[derive(Debug, Clone, Copy)]
pub struct Activity {
    pub commits: i64,
    /// Cluster-wide: every database's WAL, not only the engine's.
    pub wal_bytes: i64,
    pub updates: i64,
    pub hot_updates: i64,
    /// Estimated (see [`TABLES`]).
    pub index_entries: i64,
    /// `None` where the server does not load `pg_stat_statements`.
    pub statements: Option<Statements>,
}

impl Mark {
    pub fn until(self, later: Mark) -> Activity {
        Activity {
            commits: later.commits - self.commits,
            wal_bytes: later.wal - self.wal,
            updates: later.updates - self.updates,
            hot_updates: later.hot_updates - self.hot_updates,
            index_entries: later.index_entries - self.index_entries,
            statements: self
                .statements
                .zip(later.statements)
                .map(|(before, after)| before.until(after)),
        }
    }
}

/// The database a URL names: the path after the authority, without the query.
pub fn database_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let path = rest.split_once('/')?.1;
    let name = path.split(['?', '#']).next().unwrap_or(path);
    (!name.is_empty()).then_some(name)
}

/// `url` with its database replaced by `name`, keeping its login, host and parameters.
pub fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let query = path.find('?').map_or("", |at| &path[at..]);
    format!("{scheme}://{authority}/{name}{query}")
}

/// The host a URL names, for the loopback check.
pub fn host_of(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    Some(host)
}

/// `url` without its password, for messages.
pub fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    match rest.split_once('@') {
        Some((login, host)) if login.contains(':') => {
            let user = login.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}")
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_taken_apart_and_rebuilt() {
        let url = "postgres://postgres:pw@127.0.0.1:5432/postgres?sslmode=disable";
        assert_eq!(database_of(url), Some("postgres"));
        assert_eq!(
            with_database(url, "scratch"),
            "postgres://postgres:pw@127.0.0.1:5432/scratch?sslmode=disable"
        );
        assert_eq!(host_of(url), Some("127.0.0.1"));
        assert_eq!(host_of("http://[::1]:7480"), Some("::1"));
        assert_eq!(host_of("http://localhost"), Some("localhost"));
        assert_eq!(
            redacted(url),
            "postgres://postgres:***@127.0.0.1:5432/postgres?sslmode=disable"
        );
    }
}
