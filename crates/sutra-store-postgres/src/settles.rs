//! A group's plain settles in one statement (decision 0059; docs/design/throughput.md §3).
//!
//! Each member's fenced update is a row of one `UPDATE … FROM unnest(…)`, and its history, the
//! waits and deliveries of the parks it clears and the tasks it arms are rows of one insert or
//! delete per kind, each joined by the member's number to the updates that landed: a member
//! whose fence no longer holds (or whose owner is not the claim's) is absent from `written`, so
//! nothing of any kind of it is written, and the others are. One round trip and one executor
//! start for the whole group, where writing each member is one of each per member.

use std::sync::LazyLock;

use serde_json::Value;
use sqlx::Row;
use sqlx::types::Json;
use sutra_store::{Error, Result};
use sutra_store_sql::{StepRows, settle_fence};

use crate::codec::{db, park};
use crate::columns::{HistoryColumns, TaskColumns};
use crate::commit::{TASK_NAMES, history_insert, settle_set, tasks_insert};
use crate::statements::{Query, Scoped};

/// Writes `settles` (each a claim's, with no message, children, cancels or report), returning
/// how many landed.
pub(crate) async fn write(tx: &mut Scoped, settles: &[StepRows<'_>]) -> Result<usize> {
    let mut members = Members::default();
    let mut history = (Vec::new(), HistoryColumns::default());
    let mut cleared: (Vec<i32>, Vec<i64>) = (Vec::new(), Vec::new());
    let mut tasks = (Vec::new(), TaskColumns::default());
    for (n, rows) in settles.iter().enumerate() {
        let n = i32::try_from(n).unwrap_or(i32::MAX);
        members.push(n, rows)?;
        for event in rows.history {
            history.0.push(n);
            history.1.push(event)?;
        }
        for disarm in rows.cleared {
            cleared.0.push(n);
            cleared.1.push(park(disarm.park)?);
        }
        for task in rows.tasks {
            tasks.0.push(n);
            tasks.1.push(task)?;
        }
    }
    let query = members.bind(sqlx::query(SETTLES.as_str()));
    let query = history.1.bind(query.bind(history.0));
    let query = query.bind(cleared.0).bind(cleared.1);
    let query = tasks.1.bind(query.bind(tasks.0));
    let row = query.fetch_one(tx.connection()).await.map_err(db)?;
    let landed: i64 = row.try_get("landed").map_err(db)?;
    Ok(usize::try_from(landed).unwrap_or_default())
}

/// The members' instance rows as columns: number, tenant, id, snapshot, status, and the fence
/// each settles under ([`settle_fence`]), who holds its caller, its version.
#[derive(Default)]
struct Members<'a> {
    numbers: Vec<i32>,
    tenants: Vec<&'a str>,
    ids: Vec<&'a str>,
    snapshots: Vec<Json<Value>>,
    statuses: Vec<&'a str>,
    owners: Vec<Option<&'a str>>,
    fences: Vec<i64>,
    growths: Vec<i64>,
    held_by: Vec<Option<&'a str>>,
    versions: Vec<i64>,
}

impl<'a> Members<'a> {
    fn push(&mut self, n: i32, rows: &'a StepRows<'a>) -> Result<()> {
        let instance = &rows.snapshot.instance;
        let Some(token) = rows.claim else {
            return Err(Error::Corrupt(format!(
                "the step of `{}` was kept as a settle but settles no claim",
                instance.id
            )));
        };
        let (owner, growth) = settle_fence(token);
        self.numbers.push(n);
        self.tenants.push(&instance.tenant);
        self.ids.push(&instance.id);
        self.snapshots.push(Json(rows.snapshot.to_json()));
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

/// The members' settles (`$1`–`$10`, [`Members`]), their history (`$11`–`$17`: the member's
/// number, then [`HistoryColumns`]), the parks they clear (`$18`–`$19`: number, park) and the
/// tasks they arm (`$20`–`$31`: number, then [`TaskColumns`]).
static SETTLES: LazyLock<String> = LazyLock::new(|| {
    let history = history_insert(
        "written JOIN unnest($11::int[], $12::bigint[], $13::bigint[], $14::text[], $15::text[],
                             $16::bigint[], $17::jsonb[])
                      AS event (n, seq, at, kind, node, token, detail) USING (n)",
    );
    let tasks = tasks_insert(&format!(
        "written JOIN unnest($20::int[], $21::text[], $22::bigint[], $23::text[], $24::jsonb[],
                             $25::bigint[], $26::bigint[], $27::bigint[], $28::text[],
                             $29::text[], $30::bigint[], $31::bigint[])
                      AS task (n, {TASK_NAMES}) USING (n)"
    ));
    format!(
        "WITH member AS (
             SELECT * FROM unnest($1::int[], $2::text[], $3::text[], $4::jsonb[], $5::text[],
                                  $6::text[], $7::bigint[], $8::bigint[], $9::text[],
                                  $10::bigint[])
                  AS m (n, m_tenant, m_id, m_snapshot, m_status, m_owner, m_fence, m_growth,
                        m_held_by, m_version)),
         written AS (
             UPDATE instances SET {settle}
             FROM member
             WHERE tenant = m_tenant AND id = m_id AND (m_owner IS NULL OR owner = m_owner)
               AND fence = m_fence
             RETURNING n, tenant, id),
         cleared AS (SELECT * FROM unnest($18::int[], $19::bigint[]) AS cleared (n, park)),
         history_rows AS ({history}),
         cleared_waits AS (
             DELETE FROM waits USING written JOIN cleared USING (n)
             WHERE waits.instance = written.id AND waits.park = cleared.park),
         cleared_deliveries AS (
             DELETE FROM deliveries USING written JOIN cleared USING (n)
             WHERE deliveries.instance = written.id AND deliveries.park = cleared.park),
         armed_tasks AS ({tasks})
         SELECT count(*) AS landed FROM written",
        settle = settle_set(
            "m_snapshot",
            "m_status",
            "m_growth",
            "m_held_by",
            "m_version"
        ),
    )
});
