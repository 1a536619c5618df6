//! Failover to a promoted standby through a URL that names several hosts
//! (docs/decisions/0080-failover-through-a-multi-host-url.md).
//!
//! libpq's users name a primary and its standbys in one URL —
//! `postgres://sutra:secret@db-a:5432,db-b:5432/sutra?target_session_attrs=read-write` — and
//! libpq connects to the first host that accepts writes. sqlx connects to one host, so the store
//! does that itself: it keeps one set of connect options per host and points its pools at the
//! one that accepts writes. The store writes in nearly every operation, so it always seeks what
//! libpq calls `read-write`; `target_session_attrs` may say `any`, `read-write` or `primary` (so
//! that one URL serves psql and Sutra alike), and is refused when it asks for a standby.
//!
//! At open the hosts are tried in the URL's order. After it a watcher asks the primary once a
//! second whether it still is (`pg_is_in_recovery()`, on a connection of its own). When the
//! primary is gone or has become a standby, the watcher tries every host in order until one
//! accepts writes, points every pool at it, and from then on the pools discard at acquire any
//! connection opened before the switch (one to a demoted primary would meet
//! `read_only_sql_transaction` on its next write). Until the switch, operations fail as
//! [`Error::Unavailable`], which callers retry; what a primary acknowledged is on the standby only
//! if the primary waited for it (`synchronous_commit` with `synchronous_standby_names`), which is
//! the database's setting, not the store's.
//!
//! A URL with one host has no watcher and no check: nothing changes for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{Connection, PgConnection};
use sutra_store::{Error, Result};
use tokio::task::JoinHandle;

use crate::{connect_error, connect_options};

/// How often the watcher asks the primary whether it still is.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// How long a try of one host may take: a host that neither answers nor refuses (a partition)
/// must not hold up the ones after it.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Between two rounds of tries when no host accepts writes (the standby is not promoted yet).
const SEARCH_PAUSE: Duration = Duration::from_millis(250);

/// The URL parameter libpq reads to choose among the hosts.
const TARGET_SESSION_ATTRS: &str = "target_session_attrs";

/// What `target_session_attrs` may say: each finds a server that accepts writes among hosts
/// that are a primary and its standbys.
const WRITABLE_TARGETS: [&str; 3] = ["any", "read-write", "primary"];

/// The hosts of a multi-host URL, and when the pools last moved from one to another.
pub(crate) struct Failover {
    hosts: Vec<PgConnectOptions>,
    opened: Instant,
    /// Nanoseconds after `opened` of the last switch; 0: none yet.
    switched: AtomicU64,
}

impl Failover {
    /// Whether a pooled connection of this `age` was opened before the last switch, so to a host
    /// that no longer accepts writes.
    pub(crate) fn predates_switch(&self, age: Duration) -> bool {
        let switched = self.switched.load(Ordering::Relaxed);
        switched != 0
            && age
                > self
                    .opened
                    .elapsed()
                    .saturating_sub(Duration::from_nanos(switched))
    }

    fn mark_switch(&self) {
        let after = u64::try_from(self.opened.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.switched.store(after.max(1), Ordering::Relaxed);
    }
}

/// Where a URL's pools connect: the one host it names, or the first of its hosts that accepted
/// writes at open and the watcher to spawn once the pools exist.
pub(crate) struct Primary {
    pub connect: PgConnectOptions,
    watch: Option<Watch>,
}

struct Watch {
    failover: Arc<Failover>,
    current: usize,
    probe: PgConnection,
}

/// A pool the watcher points at the primary, and how that pool dresses a host's options (its
/// session settings).
pub(crate) type Target = (PgPool, fn(PgConnectOptions) -> PgConnectOptions);

/// The watcher's task, stopped when the store that spawned it is dropped.
pub(crate) struct Watcher(JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Primary {
    /// The switch record the pools consult at acquire; `None` for a one-host URL.
    pub(crate) fn failover(&self) -> Option<Arc<Failover>> {
        self.watch.as_ref().map(|watch| watch.failover.clone())
    }

    /// Spawns the watcher over `targets` (nothing for a one-host URL).
    pub(crate) fn watch(self, targets: Vec<Target>) -> Option<Watcher> {
        let watch = self.watch?;
        Some(Watcher(tokio::spawn(watch.run(targets))))
    }
}

/// The primary of `url`: for a one-host URL its options, unchecked (as before failover existed);
/// for several hosts the first, in the URL's order, that accepts writes now.
pub(crate) async fn primary(url: &str) -> Result<Primary> {
    let urls = host_urls(url)?;
    if let [url] = urls.as_slice() {
        return Ok(Primary {
            connect: connect_options(url)?,
            watch: None,
        });
    }
    let hosts = urls
        .iter()
        .map(|url| connect_options(url))
        .collect::<Result<Vec<_>>>()?;
    let mut refusals = Vec::new();
    for (current, host) in hosts.iter().enumerate() {
        match accepting_writes(host).await {
            Ok(probe) => {
                let connect = host.clone();
                let failover = Arc::new(Failover {
                    hosts,
                    opened: Instant::now(),
                    switched: AtomicU64::new(0),
                });
                return Ok(Primary {
                    connect,
                    watch: Some(Watch {
                        failover,
                        current,
                        probe,
                    }),
                });
            }
            Err(why) => refusals.push(format!("{}: {why}", name(host))),
        }
    }
    Err(Error::Unavailable(format!(
        "none of the URL's {} hosts accepts writes ({}); the store needs the primary",
        hosts.len(),
        refusals.join("; ")
    )))
}

impl Watch {
    async fn run(mut self, targets: Vec<Target>) {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if is_primary(&mut self.probe).await {
                continue;
            }
            let (found, probe) = self.search().await;
            self.probe = probe;
            if found == self.current {
                // The same server came back (a restart): the pools reconnect by themselves.
                continue;
            }
            let hosts = &self.failover.hosts;
            for (pool, dress) in &targets {
                pool.set_connect_options(dress(hosts[found].clone()));
            }
            self.failover.mark_switch();
            tracing::warn!(
                from = %name(&hosts[self.current]),
                to = %name(&hosts[found]),
                "PostgreSQL failover: the primary moved; connections to the old one are dropped"
            );
            self.current = found;
        }
    }

    /// Tries every host in order, round after round, until one accepts writes.
    async fn search(&self) -> (usize, PgConnection) {
        loop {
            for (index, host) in self.failover.hosts.iter().enumerate() {
                if let Ok(probe) = accepting_writes(host).await {
                    return (index, probe);
                }
            }
            tokio::time::sleep(SEARCH_PAUSE).await;
        }
    }
}

/// A connection to `host` if it accepts writes, else why not.
async fn accepting_writes(host: &PgConnectOptions) -> std::result::Result<PgConnection, String> {
    let connected = tokio::time::timeout(PROBE_TIMEOUT, PgConnection::connect_with(host)).await;
    let mut connection = match connected {
        Ok(Ok(connection)) => connection,
        Ok(Err(error)) => {
            return Err(match connect_error(error) {
                Error::Unavailable(why) => why,
                other => other.to_string(),
            });
        }
        Err(_) => return Err(format!("no answer within {PROBE_TIMEOUT:?}")),
    };
    if is_primary(&mut connection).await {
        Ok(connection)
    } else {
        Err("a standby (in recovery), or it stopped answering".to_owned())
    }
}

/// Whether the server behind `connection` answers, and is not in recovery.
async fn is_primary(connection: &mut PgConnection) -> bool {
    let asked = sqlx::query_scalar::<_, bool>("SELECT pg_is_in_recovery()").fetch_one(connection);
    matches!(
        tokio::time::timeout(PROBE_TIMEOUT, asked).await,
        Ok(Ok(false))
    )
}

/// `host:port`, as logs and errors name a host (never the login).
fn name(host: &PgConnectOptions) -> String {
    format!("{}:{}", host.get_host(), host.get_port())
}

/// One URL per host of `url`, in its order, each with the login, database and parameters of
/// `url` and without `target_session_attrs` (checked here, unknown to sqlx). `url` itself, with
/// that parameter checked and removed, when it names one host.
fn host_urls(url: &str) -> Result<Vec<String>> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok(vec![url.to_owned()]);
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (login, hosts) = match authority.rsplit_once('@') {
        Some((login, hosts)) => (format!("{login}@"), hosts),
        None => (String::new(), authority),
    };
    let tail = without_target_session_attrs(tail)?;
    hosts
        .split(',')
        .map(|host| {
            if host.is_empty() && hosts.contains(',') {
                return Err(Error::Unavailable(
                    "the URL's list of hosts has an empty entry: separate hosts with one comma"
                        .to_owned(),
                ));
            }
            Ok(format!("{scheme}://{login}{host}{tail}"))
        })
        .collect()
}

/// `tail` (the URL's path and query) without `target_session_attrs`, refused when it asks for
/// a server the store could not write to.
fn without_target_session_attrs(tail: &str) -> Result<String> {
    let Some((path, query)) = tail.split_once('?') else {
        return Ok(tail.to_owned());
    };
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some((TARGET_SESSION_ATTRS, value)) if WRITABLE_TARGETS.contains(&value) => {}
            Some((TARGET_SESSION_ATTRS, value)) => {
                return Err(Error::Unavailable(format!(
                    "{TARGET_SESSION_ATTRS}={value}: the store writes, so it connects to the \
                     host that accepts writes; use read-write (or leave it out)"
                )));
            }
            _ => kept.push(pair),
        }
    }
    Ok(match kept.is_empty() {
        true => path.to_owned(),
        false => format!("{path}?{}", kept.join("&")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_of_several_hosts_is_one_url_per_host_with_the_same_login_and_database() {
        let urls = host_urls(
            "postgres://sutra:s3cret@db-a:5432,db-b:5433,[::1]:5434/sutra?sslmode=require&\
             target_session_attrs=read-write&application_name=x",
        )
        .expect("a valid URL");
        assert_eq!(
            urls,
            [
                "postgres://sutra:s3cret@db-a:5432/sutra?sslmode=require&application_name=x",
                "postgres://sutra:s3cret@db-b:5433/sutra?sslmode=require&application_name=x",
                "postgres://sutra:s3cret@[::1]:5434/sutra?sslmode=require&application_name=x",
            ]
        );
    }

    #[test]
    fn a_url_of_one_host_is_itself() {
        for url in [
            "postgres://localhost/sutra",
            "postgresql://u@h:1/d?host=/tmp",
            "postgres://u:p@h",
        ] {
            assert_eq!(host_urls(url).expect("valid"), [url]);
        }
        assert_eq!(
            host_urls("postgres://h/d?target_session_attrs=primary").expect("valid"),
            ["postgres://h/d"]
        );
    }

    #[test]
    fn a_target_that_cannot_write_or_an_empty_host_is_refused() {
        for url in [
            "postgres://a,b/d?target_session_attrs=read-only",
            "postgres://a,b/d?target_session_attrs=standby",
            "postgres://a,b/d?target_session_attrs=prefer-standby",
            "postgres://a,,b/d",
        ] {
            assert!(
                matches!(host_urls(url), Err(Error::Unavailable(_))),
                "{url}"
            );
        }
    }

    #[test]
    fn only_connections_opened_before_a_switch_are_discarded() {
        let failover = Failover {
            hosts: Vec::new(),
            opened: Instant::now() - Duration::from_secs(10),
            switched: AtomicU64::new(0),
        };
        assert!(!failover.predates_switch(Duration::from_secs(9)));
        failover.mark_switch();
        assert!(failover.predates_switch(Duration::from_secs(1)));
        assert!(!failover.predates_switch(Duration::ZERO));
    }
}
