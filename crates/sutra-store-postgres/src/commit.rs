//! A step's commit on PostgreSQL: the statements of the shared script, in one transaction scoped
//! to the instance's tenant.
//!
//! Unlike SQLite, other writers run at the same time (READ COMMITTED). The fenced update that
//! leads a step's own rows ([`StepStatements::write_rows`], one statement) holds the instance's
//! row lock to the end, so no claim, sweep or other commit interleaves with the step; a park and
//! an early message on the same correlation key are ordered by advisory locks
//! ([`sutra_store_sql::Statements::serialize`]). Every statement is a round trip, which costs the
//! database more than most of these statements' work (issue 11's profile): a step's own rows
//! are written by one.

use std::sync::LazyLock;

use serde_json::Value;
use sqlx::Row;
use sqlx::types::Json;
use sutra_core::snapshot::{InstanceInfo, ParkId, Snapshot};
use sutra_store::{
    CANCEL_PARK, DeliveryId, DeliveryKind, NewChild, OutboxEntry, Report, Result, START_PARK,
    TaskState, WaitTarget,
};
use sutra_store_sql::rows::WaitRow;
use sutra_store_sql::{
    ArmedWait, Correlation, LockOn, StepRows, StepStatements, WaitArm, Wrote, settle_fence,
    write_each,
};

use crate::codec::{db, park};
use crate::columns::{HISTORY_TYPES, HistoryColumns, TASK_TYPES, TaskColumns, unnest_args};
use crate::notices;
use crate::statements::{Query, Scoped, advisory_keys};
use crate::test_switches;

impl StepStatements for Scoped {
    /// One `NOTIFY` per payload, in one statement; PostgreSQL delivers them only if this
    /// transaction commits. A pending `NOTIFY` serialises every committer that has one on a
    /// global lock, which is why only steps ending instances held elsewhere send any.
    async fn announce_ended(&mut self, instances: &[String]) -> Result<()> {
        let query = sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
            .bind(notices::ENDED)
            .bind(notices::ended_payloads(instances));
        self.execute(query).await.map(drop)
    }

    /// One statement for the whole of `rows` (see [`step_rows`]).
    async fn write_rows(&mut self, rows: &StepRows<'_>) -> Result<Wrote> {
        // A message is a start's: a settle has none.
        let message = rows.message.filter(|_| rows.claim.is_none());
        let consumed = rows.consumed.filter(|_| rows.claim.is_some());
        let sql = match (rows.claim, message, consumed) {
            (Some(_), _, None) => ROWS_AFTER_SETTLE.as_str(),
            (Some(_), _, Some(_)) => ROWS_CONSUMING.as_str(),
            (None, None, _) => ROWS_AFTER_INSERT.as_str(),
            (None, Some(_), _) => ROWS_OF_A_MESSAGE.as_str(),
        };
        let (snapshot, instance) = (rows.snapshot, &rows.snapshot.instance);
        let query = match rows.claim {
            // `$1`–`$9` of [`ROWS_AFTER_SETTLE`].
            Some(token) => {
                let (owner, growth) = settle_fence(token);
                sqlx::query(sql)
                    .bind(Json(snapshot))
                    .bind(snapshot.status.as_str())
                    .bind(&instance.tenant)
                    .bind(&instance.id)
                    .bind(owner)
                    .bind(token.fence)
                    .bind(growth)
                    .bind(rows.held_by)
                    .bind(i64::from(instance.version))
            }
            // `$1`–`$8` of [`insert_instance`].
            None => sqlx::query(sql)
                .bind(&instance.id)
                .bind(&instance.tenant)
                .bind(&instance.deployment)
                .bind(i64::from(instance.version))
                .bind(&instance.flow)
                .bind(snapshot.status.as_str())
                .bind(Json(snapshot))
                .bind(rows.held_by),
        };
        let query = HistoryColumns::of(rows.history)?.bind(query);
        let cleared = rows
            .cleared
            .iter()
            .map(|cleared| park(cleared.park))
            .collect::<Result<Vec<_>>>()?;
        let query = TaskColumns::of(rows.tasks)?.bind(query.bind(cleared));
        let mut query = CallColumns::of(rows)?.bind(query);
        if let Some(entry) = consumed {
            query = query
                .bind(&entry.channel)
                .bind(&entry.event_id)
                .bind(entry.answer.instance.as_deref())
                .bind(&entry.answer.status);
        }
        let Some(entry) = message else {
            // No row: the settle's fence no longer holds.
            let row = query.fetch_optional(self.connection()).await.map_err(db)?;
            let Some(row) = row else {
                return Ok(Wrote::ClaimLost);
            };
            let asked: Vec<i64> = row.try_get("asked").map_err(db)?;
            return Ok(Wrote::Rows {
                asked: asked.into_iter().map(DeliveryId).collect(),
            });
        };
        let query = query
            .bind(&entry.channel)
            .bind(&entry.event_id)
            .bind(entry.answer.instance.as_deref())
            .bind(&entry.answer.status)
            .bind(entry.key.as_deref());
        let row = query.fetch_one(self.connection()).await.map_err(db)?;
        let (waited, written, asked): (bool, bool, Vec<i64>) = (
            row.try_get("waited").map_err(db)?,
            row.try_get("written").map_err(db)?,
            row.try_get("asked").map_err(db)?,
        );
        Ok(match (waited, written) {
            (true, _) => Wrote::Waited,
            (false, true) => Wrote::Rows {
                asked: asked.into_iter().map(DeliveryId).collect(),
            },
            (false, false) => Wrote::Consumed,
        })
    }

    /// One statement for all of `plain` ([`crate::plain`]).
    async fn write_plain(&mut self, plain: &[StepRows<'_>]) -> Result<usize> {
        if test_switches::plain_one_by_one() {
            return write_each(self, plain).await;
        }
        crate::plain::write(self, plain).await
    }

    /// A worker completing the task concurrently holds its row: this update waits for that
    /// completion to commit, so that the deletes after it, new statements under READ COMMITTED,
    /// see the delivery the completion wrote.
    async fn cancel_tasks(&mut self, instance: &str, parks: &[ParkId]) -> Result<()> {
        let query = sqlx::query(
            "UPDATE tasks SET state = $3, updated_at = sutra_now()
             WHERE instance = $1 AND park = ANY($2) AND state IN ($4, $5)",
        );
        let parks = parks
            .iter()
            .map(|&id| park(id))
            .collect::<Result<Vec<i64>>>()?;
        let query = query
            .bind(instance)
            .bind(parks)
            .bind(TaskState::Cancelled.as_str())
            .bind(TaskState::Available.as_str())
            .bind(TaskState::Locked.as_str());
        self.execute(query).await.map(drop)
    }

    /// One statement: the locks in ascending key order, as
    /// [`sutra_store_sql::Statements::serialize`] takes them, and each key's holder as the
    /// statement's snapshot, taken before the locks, shows it.
    async fn lock_and_find_waits(
        &mut self,
        on: &[Correlation<'_>],
    ) -> Result<Vec<Option<WaitTarget>>> {
        let keys = advisory_keys(on.iter().map(|on| LockOn::Correlation(*on)));
        let (channels, wanted): (Vec<&str>, Vec<&str>) =
            on.iter().map(|on| (on.channel, on.key)).unzip();
        let tenant = on.first().map(|on| on.tenant);
        let rows: Vec<(Option<String>, Option<i64>)> = sqlx::query_as(
            "WITH locked AS (
                 SELECT count(*) AS keys FROM (
                     SELECT pg_advisory_xact_lock(key)
                     FROM (SELECT key FROM unnest($1::bigint[]) AS key ORDER BY key) AS ordered)
                 AS taken)
             SELECT waits.instance, waits.park
             FROM locked, unnest($3::text[], $4::text[]) WITH ORDINALITY AS asked (channel, key, n)
             LEFT JOIN waits ON waits.tenant = $2 AND waits.channel = asked.channel
                            AND waits.key = asked.key
             ORDER BY asked.n",
        )
        .bind(keys)
        .bind(tenant)
        .bind(channels)
        .bind(wanted)
        .fetch_all(self.connection())
        .await
        .map_err(db)?;
        rows.into_iter()
            .map(|(instance, park)| WaitRow::joined(instance, park))
            .collect()
    }

    /// One statement: the alias, and the buffered message it takes only if it was inserted.
    /// The advisory lock was taken by an earlier statement, so this one's snapshot shows every
    /// message buffered before this step asked for the lock.
    async fn insert_wait(&mut self, wait: &WaitArm<'_>, buffered: bool) -> Result<ArmedWait> {
        let (armed, early): (bool, Option<Json<Value>>) = sqlx::query_as(
            "WITH armed AS (
                 INSERT INTO waits (tenant, channel, key, instance, park)
                 VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT DO NOTHING
                 RETURNING 1),
             taken AS (
                 DELETE FROM buffered WHERE id = (
                     SELECT id FROM buffered
                     WHERE tenant = $1 AND channel = $2 AND key = $3 AND expires_at > sutra_now()
                     ORDER BY id LIMIT 1)
                   AND $6 AND EXISTS (SELECT 1 FROM armed)
                 RETURNING message)
             SELECT EXISTS (SELECT 1 FROM armed), (SELECT message FROM taken)",
        )
        .bind(wait.on.tenant)
        .bind(wait.on.channel)
        .bind(wait.on.key)
        .bind(&wait.instance.id)
        .bind(park(wait.park)?)
        .bind(buffered)
        .fetch_one(self.connection())
        .await
        .map_err(db)?;
        Ok(match armed {
            false => ArmedWait::KeyTaken,
            true => ArmedWait::Armed {
                early: early.map(|Json(message)| message),
            },
        })
    }

    async fn insert_outbox(
        &mut self,
        instance: &InstanceInfo,
        entries: &[OutboxEntry],
    ) -> Result<()> {
        for entry in entries {
            let query = sqlx::query(
                "INSERT INTO outbox (tenant, instance, deployment, version, channel, payload,
                                     message_key, idempotency_key, next_attempt_at, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, sutra_now(), sutra_now())",
            );
            let query = query
                .bind(&instance.tenant)
                .bind(&instance.id)
                .bind(&instance.deployment)
                .bind(i64::from(instance.version))
                .bind(&entry.channel)
                .bind(Json(&entry.payload))
                .bind(entry.message_key.as_deref())
                .bind(&entry.idempotency_key);
            self.execute(query).await?;
        }
        Ok(())
    }

    async fn take_delivery(&mut self, instance: &str, delivery: DeliveryId) -> Result<()> {
        let query = sqlx::query("DELETE FROM deliveries WHERE id = $1 AND instance = $2")
            .bind(delivery.0)
            .bind(instance);
        self.execute(query).await.map(drop)
    }
}

/// A step's rows after a settle: the settle's parameters are `$1`–`$9` (bound in
/// [`StepStatements::write_rows`]).
static ROWS_AFTER_SETTLE: LazyLock<String> = LazyLock::new(|| settle_rows(&WRITTEN));

/// A settle's rows with the message it consumed (a relay's): [`ROWS_AFTER_SETTLE`]'s
/// parameters, then the message's channel, event id and answer (instance, status), `$39`–`$42`.
/// Its answer is written over whatever inbox row it had (a buffered message's, whose answer had
/// no instance yet), joined to the settle like every other row: in the settle's statement, not
/// one of its own (decision 0073).
static ROWS_CONSUMING: LazyLock<String> = LazyLock::new(|| {
    let m = |n: usize| format!("${}", 10 + ROW_PARAMS + n);
    settle_rows(&format!(
        ", consumed AS (
             INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
             SELECT written.tenant, {channel}::text, {event}::text, {instance}::text,
                    {status}::text, sutra_now()
             FROM written
             ON CONFLICT (tenant, channel, event_id)
             DO UPDATE SET instance = excluded.instance, status = excluded.status)
         {WRITTEN}",
        channel = m(0),
        event = m(1),
        instance = m(2),
        status = m(3),
        WRITTEN = WRITTEN.as_str(),
    ))
});

/// A settle's [`step_rows`], ending with `last`.
fn settle_rows(last: &str) -> String {
    let rows = step_rows(
        "",
        &format!(
            "UPDATE instances SET {}
             WHERE tenant = $3 AND id = $4 AND ($5::text IS NULL OR owner = $5) AND fence = $6",
            settle_set("$1", "$2", "$7", "$8", "$9")
        ),
        10,
        last,
    );
    test_switches::settle(rows)
}

/// What a settle sets on its instance's row, given the expressions of the new snapshot and
/// status, what the fence grows by, who holds a caller (`NULL` keeps who did) and the version:
/// the claim released, the recoveries forgiven, and the end stamped on an ending.
pub(crate) fn settle_set(
    snapshot: &str,
    status: &str,
    growth: &str,
    held_by: &str,
    version: &str,
) -> String {
    format!(
        "snapshot = {snapshot}, status = {status}, owner = NULL, claimed_at = NULL,
         recoveries = 0, fence = fence + {growth}, updated_at = sutra_now(),
         held_by = COALESCE({held_by}, held_by), version = {version},
         ended_at = CASE WHEN {status} IN ('completed', 'cancelled') THEN sutra_now() END"
    )
}

/// A step's history rows, from `events` (naming `seq, at, kind, node, token, detail`) joined to
/// the instance row the statement `written`.
pub(crate) fn history_insert(events: &str) -> String {
    format!(
        "INSERT INTO history (tenant, instance, seq, at, kind, node, token, detail)
         SELECT written.tenant, written.id, seq, at, kind, node, token, detail
         FROM {events}"
    )
}

/// A step's task rows, from `tasks` (naming `task`'s columns of [`TaskColumns`]) joined to the
/// instance row the statement `written`: available, or locked for the worker that took it.
pub(crate) fn tasks_insert(tasks: &str) -> String {
    format!(
        "INSERT INTO tasks (id, tenant, instance, park, topic, input, state, attempt, retries,
                            backoff_us, lock_us, lock_token, locked_until, worker,
                            available_at, created_at, updated_at)
         SELECT task.id, written.tenant, written.id, park, topic, input,
                CASE WHEN worker IS NULL THEN 'available' ELSE 'locked' END, 1,
                retries, backoff_us, lock_us, lock_token,
                CASE WHEN worker IS NOT NULL
                     THEN GREATEST(sutra_after(taken_lock_us), expires_at) END, worker,
                sutra_now(), sutra_now(), sutra_now()
         FROM {tasks}
         ON CONFLICT (id) DO UPDATE SET {TASK_REARMED}"
    )
}

/// A start's rows: the insert's parameters are `$1`–`$8` ([`insert_instance`]).
static ROWS_AFTER_INSERT: LazyLock<String> =
    LazyLock::new(|| step_rows("", &insert_instance(""), 9, &WRITTEN));

/// A start's insert of its new, unowned instance, if `guard` holds: its id, tenant, deployment,
/// version, flow, status, snapshot and who holds a caller are `$1`–`$8`.
fn insert_instance(guard: &str) -> String {
    instance_insert(["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8"], guard)
}

/// A start's insert of a new, unowned instance: `values` are the expressions of its id, tenant,
/// deployment, version, flow, status, snapshot and who holds a caller, selected with `rest`
/// (a guard, or the rows they are read from).
pub(crate) fn instance_insert(values: [&str; 8], rest: &str) -> String {
    let [
        id,
        tenant,
        deployment,
        version,
        flow,
        status,
        snapshot,
        held_by,
    ] = values;
    format!(
        "INSERT INTO instances (id, tenant, deployment, version, flow, status, snapshot,
                                held_by, created_at, updated_at, ended_at)
         SELECT {id}, {tenant}, {deployment}, {version}, {flow}, {status}, {snapshot}, {held_by},
                sutra_now(), sutra_now(),
                CASE WHEN {status} IN ('completed', 'cancelled') THEN sutra_now() END
         {rest}"
    )
}

/// The last part of a step's rows after a settle or a start's insert: a row if the instance's was
/// written, holding the ids of the deliveries its calls' rows asked ([`ASKED`]).
static WRITTEN: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {ASKED} AS asked FROM written"));

/// The deliveries due now that a step's calls asked — its children's starts and cancels, its
/// report — as one array (empty when it asked none, or wrote nothing).
const ASKED: &str = "ARRAY(SELECT id FROM child_starts UNION ALL SELECT id FROM child_cancels
                          UNION ALL SELECT id FROM reported)";

/// How many parameters [`step_rows`] takes from its `first`: what follows them is numbered after.
const ROW_PARAMS: usize = 29;

/// A start's rows with its message: the insert's parameters are `$1`–`$8`, the rows' `$9`–`$37`
/// ([`ROW_PARAMS`]), the message's channel, event id, answer (instance, status) and correlation
/// key `$38`–`$42`.
/// The inbox row goes first, unless an instance waits on the key; the instance and every row
/// joined to it only if the inbox row is this statement's. A racing start's uncommitted inbox
/// row makes the insert wait for it and then insert nothing: the caller then reads the row the
/// racer committed, in a statement of its own.
static ROWS_OF_A_MESSAGE: LazyLock<String> = LazyLock::new(|| {
    let m = |n: usize| format!("${}", 9 + ROW_PARAMS + n);
    step_rows(
        &format!(
            "waited AS (
                 SELECT 1 FROM waits WHERE tenant = $2 AND channel = {channel} AND key = {key}),
             inboxed AS (
                 INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
                 SELECT $2, {channel}, {event}, {instance}, {status}, sutra_now()
                 WHERE NOT EXISTS (SELECT 1 FROM waited)
                 ON CONFLICT DO NOTHING
                 RETURNING 1),
             ",
            channel = m(0),
            event = m(1),
            instance = m(2),
            status = m(3),
            key = m(4),
        ),
        &insert_instance("WHERE EXISTS (SELECT 1 FROM inboxed)"),
        9,
        &format!(
            "SELECT EXISTS (SELECT 1 FROM waited) AS waited,
                    EXISTS (SELECT 1 FROM written) AS written, {ASKED} AS asked"
        ),
    )
});

/// One statement for a step's own rows ([`StepRows`]): the CTEs of `lead`, then `instance_row`,
/// which writes the instance, and every other row joined to what it returned, so that a settle
/// whose fence no longer holds (or a start whose message is not its own) writes nothing at all;
/// `last` says what was written (led by more CTEs joined to `written`, each after a comma, if it
/// has any). Its parameters from `$first` on: the history's columns
/// ([`HistoryColumns`]), the cleared parks, the tasks' columns ([`TaskColumns`]), the calls'
/// columns ([`CallColumns`]): [`ROW_PARAMS`] in all.
///
/// A step's calls are four more CTEs, each joined to `written` like every other row, and
/// set-based, so that a fan-out of any number of children is still this one statement:
/// `children` inserts the called instances `created` (naming the instance and the park waiting
/// for each), `child_starts` their `start` deliveries; `child_cancels` asks a `cancel` of each
/// child of the instance that waits on a disarmed `Call` park and has not ended, as the
/// statement's snapshot shows them (a child ending concurrently only leaves a cancel that its
/// claim finds nothing to do with, docs/design/composition.md §5.3 E); `reported` asks the
/// ending child's `child_ended` of its parent's park if the parent is there and has not ended.
/// A child's deliveries refer to a row this statement inserts: their foreign keys are checked at
/// its end, as a start's rows' are.
/// Data-modifying CTEs all see the snapshot the statement began with, which is right here: none
/// reads a table another writes, and the foreign keys of the rows joined to a new instance are
/// checked at the statement's end, when it exists.
fn step_rows(lead: &str, instance_row: &str, first: usize, last: &str) -> String {
    let p = |n: usize| format!("${}", first + n);
    let history = history_insert(&format!(
        "written, unnest({}) AS event (seq, at, kind, node, token, detail)",
        unnest_args(first, &HISTORY_TYPES)
    ));
    let tasks = tasks_insert(&format!(
        "written, unnest({}) AS task ({TASK_NAMES})",
        unnest_args(first + 7, &TASK_TYPES)
    ));
    format!(
        "WITH {lead}written AS ({instance_row} RETURNING tenant, id),
         history_rows AS ({history}),
         cleared_waits AS (
             DELETE FROM waits USING written
             WHERE waits.instance = written.id AND waits.park = ANY({cleared}::bigint[])),
         cleared_deliveries AS (
             DELETE FROM deliveries USING written
             WHERE deliveries.instance = written.id AND deliveries.park = ANY({cleared}::bigint[])),
         armed_tasks AS ({tasks}),
         children AS (
             INSERT INTO instances (id, tenant, deployment, version, flow, status, snapshot,
                                    parent, parent_park, created_at, updated_at)
             SELECT child.id, written.tenant, deployment, version, flow, 'created', snapshot,
                    written.id, park, sutra_now(), sutra_now()
             FROM written, unnest({c0}::text[], {c1}::text[], {c2}::bigint[], {c3}::text[],
                                  {c4}::jsonb[], {c5}::bigint[])
                  AS child (id, deployment, version, flow, snapshot, park)
             RETURNING id),
         child_starts AS (
             INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             SELECT written.tenant, start.id, {start_park}, 'start', start.message, sutra_now(),
                    sutra_now()
             FROM written, unnest({c0}::text[], {c6}::jsonb[]) AS start (id, message)
             WHERE start.id IN (SELECT id FROM children)
             RETURNING id),
         child_cancels AS (
             INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             SELECT child.tenant, child.id, {cancel_park}, 'cancel', 'null', sutra_now(),
                    sutra_now()
             FROM written JOIN instances child
                  ON child.tenant = written.tenant AND child.parent = written.id
             WHERE child.parent_park = ANY({cancelled}::bigint[])
               AND child.status NOT IN ('completed', 'cancelled')
             RETURNING id),
         reported AS (
             INSERT INTO deliveries (tenant, instance, park, kind, payload, due_at, created_at)
             SELECT written.tenant, {r_parent}::text, {r_park}::bigint, 'child_ended',
                    {r_payload}::jsonb, sutra_now(), sutra_now()
             FROM written
             WHERE {r_parent}::text IS NOT NULL
               AND EXISTS (SELECT 1 FROM instances parent
                           WHERE parent.tenant = written.tenant AND parent.id = {r_parent}::text
                             AND parent.status NOT IN ('completed', 'cancelled'))
             RETURNING id)
         {last}",
        cleared = p(6),
        c0 = p(18),
        c1 = p(19),
        c2 = p(20),
        c3 = p(21),
        c4 = p(22),
        c5 = p(23),
        c6 = p(24),
        cancelled = p(25),
        r_parent = p(26),
        r_park = p(27),
        r_payload = p(28),
        start_park = START_PARK.0,
        cancel_park = CANCEL_PARK.0,
    )
}

/// The names of a step's task columns ([`TaskColumns`]), in their order.
pub(crate) const TASK_NAMES: &str =
    "id, park, topic, input, retries, backoff_us, lock_us, worker, lock_token, taken_lock_us,
     expires_at";

/// What a task armed again at a park whose earlier task is resolved becomes: the new attempt,
/// available now or locked for the worker that took it.
const TASK_REARMED: &str = "topic = excluded.topic, input = excluded.input, state = excluded.state,
     attempt = 1, retries = excluded.retries, backoff_us = excluded.backoff_us,
     lock_us = excluded.lock_us, lock_token = excluded.lock_token,
     locked_until = excluded.locked_until, worker = excluded.worker,
     available_at = excluded.available_at, updated_at = excluded.updated_at";

/// A step's calls as parameters of [`step_rows`]: its children as seven arrays (id, deployment,
/// version, flow, snapshot, the park waiting for it, its start message), the disarmed `Call`
/// parks, and its report (parent, park, payload; `NULL` when it reports nothing). The kinds and
/// payloads are [`DeliveryKind::encode`]'s, as every other delivery's.
struct CallColumns<'a> {
    ids: Vec<&'a str>,
    deployments: Vec<&'a str>,
    versions: Vec<i64>,
    flows: Vec<&'a str>,
    snapshots: Vec<Json<&'a Snapshot>>,
    parks: Vec<i64>,
    starts: Vec<Json<Value>>,
    cancelled: Vec<i64>,
    report: Option<(&'a str, i64, Json<Value>)>,
}

impl<'a> CallColumns<'a> {
    fn of(rows: &'a StepRows<'a>) -> Result<CallColumns<'a>> {
        let children: &'a [NewChild] = rows.children;
        let mut columns = CallColumns {
            ids: Vec::with_capacity(children.len()),
            deployments: Vec::with_capacity(children.len()),
            versions: Vec::with_capacity(children.len()),
            flows: Vec::with_capacity(children.len()),
            snapshots: Vec::with_capacity(children.len()),
            parks: Vec::with_capacity(children.len()),
            starts: Vec::with_capacity(children.len()),
            cancelled: Vec::with_capacity(rows.cancelled_calls.len()),
            report: None,
        };
        for child in children {
            let info = &child.snapshot.instance;
            columns.ids.push(&info.id);
            columns.deployments.push(&info.deployment);
            columns.versions.push(i64::from(info.version));
            columns.flows.push(&info.flow);
            columns.snapshots.push(Json(&child.snapshot));
            columns.parks.push(park(child.park)?);
            let start = DeliveryKind::Start {
                message: child.start.clone(),
            };
            columns.starts.push(Json(start.encode().1));
        }
        for &cancelled in rows.cancelled_calls {
            columns.cancelled.push(park(cancelled)?);
        }
        if let Some(report) = rows.report {
            columns.report = Some(report_row(report)?);
        }
        Ok(columns)
    }

    fn bind(self, query: Query<'a>) -> Query<'a> {
        let (parent, park, payload) = match self.report {
            Some((parent, park, payload)) => (Some(parent), Some(park), Some(payload)),
            None => (None, None, None),
        };
        query
            .bind(self.ids)
            .bind(self.deployments)
            .bind(self.versions)
            .bind(self.flows)
            .bind(self.snapshots)
            .bind(self.parks)
            .bind(self.starts)
            .bind(self.cancelled)
            .bind(parent)
            .bind(park)
            .bind(payload)
    }
}

/// A report's parent, park and `child_ended` payload.
fn report_row(report: &Report) -> Result<(&str, i64, Json<Value>)> {
    let ended = DeliveryKind::ChildEnded {
        child: report.child.clone(),
        outcome: report.outcome.clone(),
    };
    Ok((&report.parent, park(report.park)?, Json(ended.encode().1)))
}
