//! `--preload ENDED,LIVE`: a scratch database at volume before the clock starts. Rows of the
//! shape the engine writes for `two-tasks` (a real instance's rows, its id varied): ENDED
//! completed instances with their completed tasks, history and consumed start message, and
//! LIVE suspended ones, each with an available task, written in bulk (`INSERT … SELECT … FROM
//! generate_series`), then `VACUUM ANALYZE`.
//!
//! The ended instances' rows are loaded although the hot path reads none of them: a database in
//! use holds them, their indexes are as deep as they would be, and the planner reads their
//! statistics — a `tasks` table analyzed while it held no completed task gives the poll plans
//! that walk every task of the tenant once the run has completed some.
//!
//! The live instances' tasks are on [`TOPIC`], which the bench's worker does not poll: they stay
//! suspended through the run, as a backlog of work waiting elsewhere.

use std::str::FromStr;
use std::time::Instant;

use sqlx::{Connection, PgConnection};

use super::postgres::redacted;

/// The topic of the preloaded instances' available tasks.
pub const TOPIC: &str = "bench-preloaded";

/// ENDED and LIVE, as `--preload` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preload {
    pub ended: u64,
    pub live: u64,
}

impl FromStr for Preload {
    type Err = String;

    fn from_str(text: &str) -> Result<Preload, String> {
        let counts = text.split_once(',').and_then(|(ended, live)| {
            let count = |n: &str| n.trim().replace('_', "").parse::<u64>().ok();
            Some((count(ended)?, count(live)?))
        });
        match counts {
            Some((ended, live)) => Ok(Preload { ended, live }),
            None => Err(format!(
                "{text:?} is not ENDED,LIVE (two counts, e.g. 1000000,100000)"
            )),
        }
    }
}

/// The id of preloaded instance `n`: a UUIDv7 of 2004, so older than any the engine makes and
/// in the keyset order a listing pages by.
const ID: &str = "format('01000000-0000-7000-8000-%s', lpad(to_hex(n), 12, '0'))";

/// A completed `two-tasks` instance's snapshot, `@ID@` and `@N@` to vary.
const ENDED: &str = r#"{"vars": {"input": {"n": "preload-@N@"}}, "format": 1, "status": "completed", "tokens": [], "failure": null, "instance": {"id": "@ID@", "flow": "bench-two-tasks", "tenant": "default", "version": 1, "deployment": "bench-two-tasks"}, "audit_seq": 6, "next_park": 3, "next_token": 2}"#;

/// A `two-tasks` instance parked on its first task.
const LIVE: &str = r#"{"vars": {"input": {"n": "preload-@N@"}}, "format": 1, "status": "suspended", "tokens": [{"id": 1, "node": "first", "state": {"id": 1, "kind": "task", "lock": "PT5M", "input": {"n": "preload-@N@"}, "state": "parked", "topic": "bench-first", "backoff": "PT5S", "retries": 3}, "parent": null}], "failure": null, "instance": {"id": "@ID@", "flow": "bench-two-tasks", "tenant": "default", "version": 1, "deployment": "bench-two-tasks"}, "audit_seq": 2, "next_park": 2, "next_token": 2}"#;

/// Instances `$1..=$2` of status `$3` with snapshot template `$4`; ended ones stamped ended.
const INSTANCES: &str = "INSERT INTO instances (id, tenant, deployment, version, flow, status,
        snapshot, fence, created_at, updated_at, ended_at)
    SELECT id, 'default', 'bench-two-tasks', 1, 'bench-two-tasks', $3,
        replace(replace($4, '@ID@', id), '@N@', n::text)::jsonb,
        CASE WHEN $3 = 'completed' THEN 2 ELSE 0 END, sutra_now(), sutra_now(),
        CASE WHEN $3 = 'completed' THEN sutra_now() END
    FROM generate_series($1::bigint, $2::bigint) AS n, LATERAL (SELECT {id} AS id) AS made";

/// The available task of each live instance `$1..=$2`, on topic `$3`.
const TASKS: &str = "INSERT INTO tasks (id, tenant, instance, park, topic, input, state, attempt,
        retries, backoff_us, lock_us, available_at, created_at, updated_at)
    SELECT id || ':1', 'default', id, 1, $3, jsonb_build_object('n', 'preload-' || n),
        'available', 1, 3, 5000000, 300000000, sutra_now(), sutra_now(), sutra_now()
    FROM generate_series($1::bigint, $2::bigint) AS n, LATERAL (SELECT {id} AS id) AS made";

/// The two completed tasks of each ended instance `$1..=$2`, as the bench's worker leaves them.
const ENDED_TASKS: &str =
    "INSERT INTO tasks (id, tenant, instance, park, topic, input, state, attempt,
        retries, backoff_us, lock_us, worker, available_at, created_at, updated_at)
    SELECT id || ':' || park, 'default', id, park, topic, jsonb_build_object('n', 'preload-' || n),
        'completed', 1, 3, 5000000, 300000000, 'sutra-bench', sutra_now(), sutra_now(),
        sutra_now()
    FROM generate_series($1::bigint, $2::bigint) AS n, LATERAL (SELECT {id} AS id) AS made,
        (VALUES (1, 'bench-first'), (2, 'bench-second')) AS task (park, topic)";

/// The six history events of each ended instance `$1..=$2`: started, each task parked and
/// completed, completed.
const ENDED_HISTORY: &str = r#"INSERT INTO history (tenant, instance, seq, at, kind, node, token, detail)
    SELECT 'default', id, seq, sutra_now(), kind, node, token, detail::jsonb
    FROM generate_series($1::bigint, $2::bigint) AS n, LATERAL (SELECT {id} AS id) AS made,
        (VALUES
            (1, 'started', NULL, NULL, '{"channel": "bench-two-tasks", "message": "preload"}'),
            (2, 'parked', 'first', 1, '{"kind": "task", "park": 1, "topic": "bench-first"}'),
            (3, 'task_completed', 'first', 1, '{"park": 1}'),
            (4, 'parked', 'second', 1, '{"kind": "task", "park": 2, "topic": "bench-second"}'),
            (5, 'task_completed', 'second', 1, '{"park": 2}'),
            (6, 'completed', NULL, NULL, '{}')) AS event (seq, kind, node, token, detail)"#;

/// The consumed start message of each ended instance `$1..=$2`.
const ENDED_INBOX: &str =
    "INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
    SELECT 'default', 'bench-two-tasks', 'preload-' || n, id, 'suspended', sutra_now()
    FROM generate_series($1::bigint, $2::bigint) AS n, LATERAL (SELECT {id} AS id) AS made";

/// Writes the rows into the database at `url`, whose schema the engine has applied and whose
/// `two-tasks` deployment it has made (version 1), with a line per table on stderr.
pub async fn load(url: &str, preload: Preload) -> Result<(), String> {
    let mut connection = PgConnection::connect(url)
        .await
        .map_err(|e| format!("cannot connect to {}: {e}", redacted(url)))?;
    let (ended, live) = (to_i64(preload.ended)?, to_i64(preload.live)?);
    let instances = INSTANCES.replace("{id}", ID);
    let tasks = TASKS.replace("{id}", ID);
    let live_ones = (ended + 1, ended + live);
    let completed = ["completed", ENDED];
    insert(
        &mut connection,
        "instances (completed)",
        &instances,
        (1, ended),
        &completed,
    )
    .await?;
    for (what, statement) in [
        ("tasks (completed)", ENDED_TASKS),
        ("history", ENDED_HISTORY),
        ("inbox", ENDED_INBOX),
    ] {
        let statement = statement.replace("{id}", ID);
        insert(&mut connection, what, &statement, (1, ended), &[]).await?;
    }
    let suspended = ["suspended", LIVE];
    insert(
        &mut connection,
        "instances (suspended)",
        &instances,
        live_ones,
        &suspended,
    )
    .await?;
    insert(
        &mut connection,
        "tasks (available)",
        &tasks,
        live_ones,
        &[TOPIC],
    )
    .await?;
    let started = Instant::now();
    sqlx::query("VACUUM ANALYZE")
        .execute(&mut connection)
        .await
        .map_err(|e| format!("VACUUM ANALYZE after the preload: {e}"))?;
    progress("VACUUM ANALYZE", 0, started);
    // Closing reports the connection's counts before the clock's start reads them.
    connection.close().await.map_err(|e| e.to_string())
}

/// Runs `statement` over the numbers `first..=last` with the rest of its parameters, `binds`.
async fn insert(
    connection: &mut PgConnection,
    what: &str,
    statement: &str,
    (first, last): (i64, i64),
    binds: &[&str],
) -> Result<(), String> {
    if last < first {
        return Ok(());
    }
    let started = Instant::now();
    let query = sqlx::query(sqlx::AssertSqlSafe(statement.to_owned()))
        .bind(first)
        .bind(last);
    let query = binds.iter().fold(query, |query, bind| query.bind(*bind));
    let written = query
        .execute(connection)
        .await
        .map_err(|e| format!("preloading {what}: {e}"))?;
    progress(what, written.rows_affected(), started);
    Ok(())
}

fn progress(what: &str, rows: u64, started: Instant) {
    let rows = match rows {
        0 => String::new(),
        rows => format!("{rows} rows, "),
    };
    eprintln!(
        "sutra bench: preloaded {what}: {rows}{:.1} s",
        started.elapsed().as_secs_f64()
    );
}

fn to_i64(count: u64) -> Result<i64, String> {
    i64::try_from(count).map_err(|_| format!("--preload: {count} is too many rows"))
}

#[cfg(test)]
mod tests {
    use super::Preload;

    #[test]
    fn counts_are_read_as_ended_then_live() {
        assert_eq!(
            "1000000,100000".parse(),
            Ok(Preload {
                ended: 1_000_000,
                live: 100_000
            })
        );
        assert_eq!(
            "1_000, 0".parse(),
            Ok(Preload {
                ended: 1000,
                live: 0
            })
        );
        assert!("1000".parse::<Preload>().is_err());
        assert!("a,b".parse::<Preload>().is_err());
    }
}
