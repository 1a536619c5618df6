//! A group's plain steps in one statement per kind (decision 0059; docs/design/throughput.md §3).
//!
//! Plain settles: each member's fenced update is a row of one `UPDATE … FROM unnest(…)`. Plain
//! starts: each member's inbox row is a row of one `INSERT … ON CONFLICT DO NOTHING` (none where
//! an instance waits on the message's key), and its instance one row of an insert joined to the
//! inbox rows inserted. Either way the members that landed are `written`, numbered, and their
//! history, the waits and deliveries of the parks they clear and the tasks they arm are rows of
//! one insert or delete per kind, each joined by number to `written`: a member whose fence no
//! longer holds, or whose message was consumed or is awaited, writes nothing of any kind, and
//! the others land. One round trip and one executor start for the whole kind, where writing each
//! member is one of each per member.

use std::sync::LazyLock;

use sqlx::Row;
use sqlx::types::Json;
use sutra_core::snapshot::Snapshot;
use sutra_store::{Error, Result};
use sutra_store_sql::{StepRows, settle_fence};

use crate::codec::{db, park};
use crate::columns::{HISTORY_TYPES, HistoryColumns, TASK_TYPES, TaskColumns, unnest_args};
use crate::commit::{TASK_NAMES, history_insert, instance_insert, settle_set, tasks_insert};
use crate::statements::{Query, Scoped};

/// Writes `plain` steps — all settles (a claim's) or all starts (a message's), none with
/// children, cancels or report — returning how many landed.
pub(crate) async fn write(tx: &mut Scoped, plain: &[StepRows<'_>]) -> Result<usize> {
    let starts = plain.first().is_some_and(|rows| rows.claim.is_none());
    let mut rows = Rows::default();
    let mut query = if starts {
        let mut members = Starts::default();
        for (n, step) in (0..).zip(plain) {
            members.push(n, step)?;
            rows.push(n, step)?;
        }
        members.bind(sqlx::query(STARTS.as_str()))
    } else {
        let mut members = Settles::default();
        for (n, step) in (0..).zip(plain) {
            members.push(n, step)?;
            rows.push(n, step)?;
        }
        members.bind(sqlx::query(SETTLES.as_str()))
    };
    query = rows.bind(query);
    let row = query.fetch_one(tx.connection()).await.map_err(db)?;
    let landed: i64 = row.try_get("landed").map_err(db)?;
    Ok(usize::try_from(landed).unwrap_or_default())
}

/// The settles' instance rows as columns: number, tenant, id, snapshot, status, and the fence
/// each settles under ([`settle_fence`]), who holds its caller, its version.
#[derive(Default)]
struct Settles<'a> {
    numbers: Vec<i32>,
    tenants: Vec<&'a str>,
    ids: Vec<&'a str>,
    snapshots: Vec<Json<&'a Snapshot>>,
    statuses: Vec<&'a str>,
    owners: Vec<Option<&'a str>>,
    fences: Vec<i64>,
    growths: Vec<i64>,
    held_by: Vec<Option<&'a str>>,
    versions: Vec<i64>,
}

impl<'a> Settles<'a> {
    fn push(&mut self, n: i32, rows: &'a StepRows<'a>) -> Result<()> {
        let instance = &rows.snapshot.instance;
        // A settle consuming a message (a relay's) is not plain (`deferred::deferrable`).
        let (Some(token), None) = (rows.claim, rows.consumed) else {
            return Err(kept_as(&instance.id, "a settle"));
        };
        let (owner, growth) = settle_fence(token);
        self.numbers.push(n);
        self.tenants.push(&instance.tenant);
        self.ids.push(&instance.id);
        self.snapshots.push(Json(rows.snapshot));
        self.statuses.push(rows.snapshot.status.as_str());
        self.owners.push(owner);
        self.fences.push(token.fence);
        self.growths.push(growth);
        self.held_by.push(rows.held_by);
        self.versions.push(i64::from(instance.version));
        Ok(())
    }

    fn bind(self, query: Query<'a>) -> Query<'a> {
        query
            .bind(self.numbers)
            .bind(self.tenants)
            .bind(self.ids)
            .bind(self.snapshots)
            .bind(self.statuses)
            .bind(self.owners)
            .bind(self.fences)
            .bind(self.growths)
            .bind(self.held_by)
            .bind(self.versions)
    }
}

/// The starts' instance rows and messages as columns: number, id, tenant, deployment, version,
/// flow, status, snapshot, who holds its caller; the message's channel, event id, answer
/// (instance, status) and correlation key.
#[derive(Default)]
struct Starts<'a> {
    numbers: Vec<i32>,
    ids: Vec<&'a str>,
    tenants: Vec<&'a str>,
    deployments: Vec<&'a str>,
    versions: Vec<i64>,
    flows: Vec<&'a str>,
    statuses: Vec<&'a str>,
    snapshots: Vec<Json<&'a Snapshot>>,
    held_by: Vec<Option<&'a str>>,
    channels: Vec<&'a str>,
    events: Vec<&'a str>,
    answered: Vec<Option<&'a str>>,
    answer_statuses: Vec<&'a str>,
    keys: Vec<Option<&'a str>>,
}

impl<'a> Starts<'a> {
    fn push(&mut self, n: i32, rows: &'a StepRows<'a>) -> Result<()> {
        let instance = &rows.snapshot.instance;
        let (None, Some(entry)) = (rows.claim, rows.message) else {
            return Err(kept_as(&instance.id, "a start"));
        };
        self.numbers.push(n);
        self.ids.push(&instance.id);
        self.tenants.push(&instance.tenant);
        self.deployments.push(&instance.deployment);
        self.versions.push(i64::from(instance.version));
        self.flows.push(&instance.flow);
        self.statuses.push(rows.snapshot.status.as_str());
        self.snapshots.push(Json(rows.snapshot));
        self.held_by.push(rows.held_by);
        self.channels.push(&entry.channel);
        self.events.push(&entry.event_id);
        self.answered.push(entry.answer.instance.as_deref());
        self.answer_statuses.push(&entry.answer.status);
        self.keys.push(entry.key.as_deref());
        Ok(())
    }

    fn bind(self, query: Query<'a>) -> Query<'a> {
        query
            .bind(self.numbers)
            .bind(self.ids)
            .bind(self.tenants)
            .bind(self.deployments)
            .bind(self.versions)
            .bind(self.flows)
            .bind(self.statuses)
            .bind(self.snapshots)
            .bind(self.held_by)
            .bind(self.channels)
            .bind(self.events)
            .bind(self.answered)
            .bind(self.answer_statuses)
            .bind(self.keys)
    }
}

/// A step kept as `kind` that is not one: a bug of the group's, refused before any write.
fn kept_as(instance: &str, kind: &str) -> Error {
    Error::Corrupt(format!(
        "the step of `{instance}` was kept as {kind} but is not one"
    ))
}

/// Every kind's rows besides its instance's, each with its member's number: history (seven
/// columns), the parks cleared (two), the tasks armed (twelve).
#[derive(Default)]
struct Rows<'a> {
    history: (Vec<i32>, HistoryColumns<'a>),
    cleared: (Vec<i32>, Vec<i64>),
    tasks: (Vec<i32>, TaskColumns<'a>),
}

impl<'a> Rows<'a> {
    fn push(&mut self, n: i32, rows: &'a StepRows<'a>) -> Result<()> {
        for event in rows.history {
            self.history.0.push(n);
            self.history.1.push(event)?;
        }
        for disarm in rows.cleared {
            self.cleared.0.push(n);
            self.cleared.1.push(park(disarm.park)?);
        }
        for task in rows.tasks {
            self.tasks.0.push(n);
            self.tasks.1.push(task)?;
        }
        Ok(())
    }

    fn bind(self, query: Query<'a>) -> Query<'a> {
        let query = self.history.1.bind(query.bind(self.history.0));
        let query = query.bind(self.cleared.0).bind(self.cleared.1);
        self.tasks.1.bind(query.bind(self.tasks.0))
    }
}

/// The settles (`$1`–`$10`, [`Settles`]), then [`Rows`] from `$11`.
static SETTLES: LazyLock<String> = LazyLock::new(|| {
    let lead = format!(
        "member AS (
             SELECT * FROM unnest((SELECT $1::int[]), $2::text[], $3::text[], $4::jsonb[], $5::text[],
                                  $6::text[], $7::bigint[], $8::bigint[], $9::text[],
                                  $10::bigint[])
                  AS m (n, m_tenant, m_id, m_snapshot, m_status, m_owner, m_fence, m_growth,
                        m_held_by, m_version)),
         written AS (
             UPDATE instances SET {settle}
             FROM member
             WHERE tenant = m_tenant AND id = m_id AND (m_owner IS NULL OR owner = m_owner)
               AND fence = m_fence
             RETURNING n, tenant, id),",
        settle = settle_set(
            "m_snapshot",
            "m_status",
            "m_growth",
            "m_held_by",
            "m_version"
        ),
    );
    kept_rows(&lead, 11)
});

/// The starts (`$1`–`$14`, [`Starts`]), then [`Rows`] from `$15`. A message some instance waits
/// on is a relay, and one whose inbox row is there was consumed: either inserts nothing, and
/// its instance is not inserted. A racing start's uncommitted inbox row makes the insert wait
/// for it, and then insert nothing.
static STARTS: LazyLock<String> = LazyLock::new(|| {
    let values = [
        "m_id",
        "m_tenant",
        "m_deployment",
        "m_version",
        "m_flow",
        "m_status",
        "m_snapshot",
        "m_held_by",
    ];
    let lead = format!(
        "member AS (
             SELECT * FROM unnest((SELECT $1::int[]), $2::text[], $3::text[], $4::text[], $5::bigint[],
                                  $6::text[], $7::text[], $8::jsonb[], $9::text[], $10::text[],
                                  $11::text[], $12::text[], $13::text[], $14::text[])
                  AS m (n, m_id, m_tenant, m_deployment, m_version, m_flow, m_status,
                        m_snapshot, m_held_by, m_channel, m_event, m_answered,
                        m_answer_status, m_key)),
         inboxed AS (
             INSERT INTO inbox (tenant, channel, event_id, instance, status, received_at)
             SELECT m_tenant, m_channel, m_event, m_answered, m_answer_status, sutra_now()
             FROM member
             WHERE NOT EXISTS (SELECT 1 FROM waits
                               WHERE tenant = m_tenant AND channel = m_channel AND key = m_key)
             ON CONFLICT DO NOTHING
             RETURNING tenant, channel, event_id),
         inserted AS ({insert} RETURNING id),
         written AS (
             SELECT n, m_tenant AS tenant, m_id AS id FROM member JOIN inserted ON id = m_id),",
        insert = instance_insert(
            values,
            "FROM member JOIN inboxed
                  ON inboxed.tenant = m_tenant AND inboxed.channel = m_channel
                 AND inboxed.event_id = m_event",
        ),
    );
    kept_rows(&lead, 15)
});

/// The statement of a kind: its `lead` CTEs, which end with `written` (each landed member's
/// number, tenant and id), then the rows of [`Rows`] from `$first`, each joined to `written`.
///
/// Each `unnest` takes its first array through a scalar subquery, `(SELECT $n::int[])`, which
/// the planner cannot see into: it estimates the rows at no fewer than ten, however few the
/// arrays hold, in a custom plan as in the generic one. Bound plainly, a custom plan for one
/// or two members always looked cheaper than the generic plan for ten, so the statement —
/// large, and dear to plan — was planned anew at every call where groups are small (fan-out's
/// completions: 9,024 plans in 9,016 calls, 0.64 ms each; docs/performance.md, "The plain
/// steps' plan kept"). The same end as the claims' JSON array (decision 0069).
fn kept_rows(lead: &str, first: usize) -> String {
    let p = |k: usize| format!("${}", first + k);
    let history = history_insert(&format!(
        "written JOIN unnest((SELECT ${first}::int[]), {})
                      AS event (n, seq, at, kind, node, token, detail) USING (n)",
        unnest_args(first + 1, &HISTORY_TYPES)
    ));
    let tasks = tasks_insert(&format!(
        "written JOIN unnest((SELECT ${}::int[]), {}) AS task (n, {TASK_NAMES}) USING (n)",
        first + 9,
        unnest_args(first + 10, &TASK_TYPES)
    ));
    format!(
        "WITH {lead}
         cleared AS (SELECT * FROM unnest((SELECT {c0}::int[]), {c1}::bigint[]) AS cleared (n, park)),
         history_rows AS ({history}),
         cleared_waits AS (
             DELETE FROM waits USING written JOIN cleared USING (n)
             WHERE waits.instance = written.id AND waits.park = cleared.park),
         cleared_deliveries AS (
             DELETE FROM deliveries USING written JOIN cleared USING (n)
             WHERE deliveries.instance = written.id AND deliveries.park = cleared.park),
         armed_tasks AS ({tasks})
         SELECT count(*) AS landed FROM written",
        c0 = p(7),
        c1 = p(8),
    )
}
