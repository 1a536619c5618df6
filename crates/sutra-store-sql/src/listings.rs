//! The API's listings, built once: `QueryBuilder` numbers the placeholders in each backend's own
//! style, so the SQL of a listing is the same text for both. Only the filters given appear in it,
//! so that each combination gets a plan (and, on PostgreSQL, a cached statement) that uses its
//! index.

use sqlx::{Database, Encode, QueryBuilder, Type};
use sutra_store::codec::micros;
use sutra_store::{InstanceFilter, TaskFilter};

/// `SELECT` of the columns of an [`crate::rows::InstanceRow`] of `tenant` that match `filter`, in
/// id order.
pub fn instances<DB>(tenant: &str, filter: &InstanceFilter) -> QueryBuilder<DB>
where
    DB: Database,
    for<'t> String: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let mut sql = QueryBuilder::new(
        "SELECT snapshot, owner, fence, recoveries, created_at, updated_at FROM instances
         WHERE tenant = ",
    );
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
