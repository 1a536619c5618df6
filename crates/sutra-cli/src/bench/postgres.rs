//! The bench's PostgreSQL side: scratch databases made for one run and dropped after it, and
//! the server's commit counter (`pg_stat_database.xact_commit`).
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

    /// Transactions committed in database `name` so far, as far as the statistics collector
    /// has been told: a backend reports its counts at most once a second while busy, and at
    /// the latest when it disconnects.
    pub async fn commits(&mut self, name: &str) -> Result<i64, String> {
        sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
            .bind(name)
            .fetch_one(&mut self.connection)
            .await
            .map_err(|e| format!("cannot read the commit counter of {name}: {e}"))
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
