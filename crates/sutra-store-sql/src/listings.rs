//! The API's listings, built once: `QueryBuilder` numbers the placeholders in each backend's own
//! style, so the SQL of a listing is the same text for both. Only the filters given appear in it,
//! so that each combination gets a plan (and, on PostgreSQL, a cached statement) that uses its
//! index.

use futures_util::{Stream, TryStreamExt};
use sqlx::{Database, Encode, QueryBuilder, Type};
use sutra_store::codec::micros;
use sutra_store::{InstanceFilter, Result, TaskFilter};

use crate::rows::InstanceRow;

/// `SELECT` of the columns of an [`crate::rows::InstanceSummaryRow`] of `tenant` that match
/// `filter`, in id order. Of the snapshot it reads a failed instance's `failure` and, when
/// `tokens`, the `tokens`: `->>` gives a member's JSON text on PostgreSQL and SQLite alike, so
/// that neither the variables nor the rest of the snapshot leave the database. A row marked
/// unreadable has its failure in its own column and no snapshot worth reading: `CASE` looks no
/// further (SQLite's `->>` raises an error on text that is not JSON, and would fail the page).
pub fn summaries<DB>(tenant: &str, filter: &InstanceFilter, tokens: bool) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let tokens = if tokens {
        "CASE WHEN unreadable IS NULL THEN snapshot ->> 'tokens' END"
    } else {
        "NULL"
    };
    let select = format!(
        "SELECT id, tenant, deployment, version, flow, status, parent, created_at, updated_at,
                CASE WHEN unreadable IS NOT NULL THEN unreadable
                     WHEN status = 'failed' THEN snapshot ->> 'failure' END AS failure,
                {tokens} AS tokens
         FROM instances WHERE tenant = "
    );
    filtered(QueryBuilder::new(select), tenant, filter)
}

/// `SELECT` of the columns of an [`crate::rows::InstanceRow`] of `tenant` that match `filter`, in
/// id order.
pub fn instances<DB>(tenant: &str, filter: &InstanceFilter) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let select = QueryBuilder::new(
        "SELECT snapshot, owner, fence, recoveries, created_at, updated_at, unreadable
         FROM instances WHERE tenant = ",
    );
    filtered(select, tenant, filter)
}

/// The rows of `rows` up to the one whose variables bring those taken to `budget` bytes, and
/// whether they did (rows may be left). Taken as they stream, so that a page of large instances
/// holds no more than the budget and one instance in memory.
pub async fn within_budget(
    rows: impl Stream<Item = Result<InstanceRow>>,
    budget: usize,
) -> Result<(Vec<InstanceRow>, bool)> {
    let mut rows = std::pin::pin!(rows);
    let (mut taken, mut spent) = (Vec::new(), 0);
    while spent < budget {
        let Some(row) = rows.try_next().await? else {
            return Ok((taken, false));
        };
        spent += row.vars_bytes();
        taken.push(row);
    }
    Ok((taken, true))
}

/// `select` (ending in `WHERE tenant = `) completed with the tenant and the filters of `filter`.
fn filtered<DB>(
    mut sql: QueryBuilder<DB>,
    tenant: &str,
    filter: &InstanceFilter,
) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    sql.push_bind(tenant.to_owned());
    if let Some(status) = filter.status {
        sql.push(" AND status = ")
            .push_bind(status.as_str().to_owned());
    }
    if let Some(flow) = &filter.flow {
        sql.push(" AND flow = ").push_bind(flow.clone());
    }
    if let Some(version) = filter.version {
        sql.push(" AND version = ").push_bind(i64::from(version));
    }
    // `instances_by_parent` (tenant, parent, id) serves it, paged by id.
    if let Some(parent) = &filter.parent {
        sql.push(" AND parent = ").push_bind(parent.clone());
    }
    if let Some(before) = filter.created_before {
        sql.push(" AND created_at < ").push_bind(micros(before));
    }
    if let Some(after) = filter.created_after {
        sql.push(" AND created_at >= ").push_bind(micros(after));
    }
    page(&mut sql, filter.after.as_ref(), filter.limit);
    sql
}

/// `SELECT` of the columns of a [`crate::rows::TaskRow`] of `tenant` that match `filter`, in id
/// order.
pub fn tasks<DB>(tenant: &str, filter: &TaskFilter) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let mut sql = QueryBuilder::new(concat!(
        "SELECT ",
        task_columns!(),
        " FROM tasks WHERE tenant = "
    ));
    sql.push_bind(tenant.to_owned());
    if let Some(topic) = &filter.topic {
        sql.push(" AND topic = ").push_bind(topic.clone());
    }
    if let Some(state) = filter.state {
        sql.push(" AND state = ")
            .push_bind(state.as_str().to_owned());
    }
    page(&mut sql, filter.after.as_ref(), filter.limit);
    sql
}

/// Keyset paging: ids after `after`, in id order, at most `limit` of them (`0`: no limit).
fn page<DB>(sql: &mut QueryBuilder<DB>, after: Option<&String>, limit: u32)
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    if let Some(after) = after {
        sql.push(" AND id > ").push_bind(after.clone());
    }
    sql.push(" ORDER BY id");
    if limit > 0 {
        sql.push(" LIMIT ").push_bind(i64::from(limit));
    }
}
