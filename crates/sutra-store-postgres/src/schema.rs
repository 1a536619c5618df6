//! The schema's lifecycle: applying migrations as the role that owns the tables, and telling
//! whether the role a replica serves as is held by row-level security at all.
//!
//! Two roles, because a role that owns the tables can switch their row security off: the owner
//! migrates (`sutra db migrate --db URL`, or `sutra.store.migrate-url`), replicas serve as a
//! member of `sutra_app`, which may only read and write rows (migration 0002). A replica told to
//! migrate at start through its own serving role therefore finds nothing to do when the schema is
//! current — it checks first, with nothing but a read — and, when something is pending, fails
//! saying which URL to migrate with. docs/decisions/0019-tenancy-and-tokens.md.

use sqlx::migrate::{MigrateError, Migrator};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use sutra_store::{Error, Result};

use crate::codec::db;
use crate::connect_error;

/// The schema, embedded in the binary: applied by [`crate::open`] unless disabled,
/// and by [`crate::migrate`] (`sutra db migrate`).
static MIGRATOR: Migrator = sqlx::migrate!();

/// SQLSTATE of a privilege the role lacks.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// Brings the schema at `options` up to date over a connection of its own, without the pool's
/// lock timeout: a migrator waits for another replica's migrator to finish, however long it
/// takes. A current schema is left alone without taking the migrators' lock or creating
/// anything, which a serving role may not do.
pub async fn migrate_with(options: &PgConnectOptions) -> Result<()> {
    let mut connection = options.connect().await.map_err(connect_error)?;
    if !is_current(&mut connection).await {
        MIGRATOR
            .run(&mut connection)
            .await
            .map_err(|e| migration_failed(e, options))?;
    }
    connection.close().await.map_err(db)
}

/// Whether every migration this build knows is applied, unchanged, and no other. Anything the
/// check cannot read (no bookkeeping table yet, no grant on it) counts as not current: the
/// migrator then decides, and explains.
async fn is_current(connection: &mut PgConnection) -> bool {
    let applied: Vec<(i64, Vec<u8>)> = match sqlx::query_as(
        "SELECT version, checksum FROM _sqlx_migrations WHERE success ORDER BY version",
    )
    .fetch_all(connection)
    .await
    {
        Ok(applied) => applied,
        Err(_) => return false,
    };
    let known = MIGRATOR
        .iter()
        .filter(|migration| migration.migration_type.is_up_migration())
        .map(|migration| (migration.version, migration.checksum.as_ref()));
    applied
        .iter()
        .map(|(version, checksum)| (*version, checksum.as_slice()))
        .eq(known)
}

/// A schema this build does not know (migrated by a newer Sutra, or edited by hand) is not
/// something a retry fixes; a role that may not change the schema needs the owner's URL.
fn migration_failed(error: MigrateError, options: &PgConnectOptions) -> Error {
    match error {
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) if refused(&e) => {
            Error::Unavailable(format!(
                "the role {} may not change the schema ({e}); migrate as the role that owns it: \
                 `sutra db migrate --db URL`, or set sutra.store.migrate-url",
                options.get_username()
            ))
        }
        MigrateError::Execute(e) | MigrateError::ExecuteMigration(e, _) => db(e),
        other => Error::Corrupt(format!("the database schema: {other}")),
    }
}

fn refused(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(e) if e.code().as_deref() == Some(INSUFFICIENT_PRIVILEGE))
}

/// Whether the server runs autovacuum. Without it nothing analyzes the engine's tables, whose
/// statements are then planned without statistics — scans and `tenant`-led indexes that cost
/// more as the tables grow (docs/performance.md, "Plans of a young database, and a database in
/// use"; decision 0067) — and nothing vacuums their dead rows.
pub async fn autovacuum_runs(options: &PgConnectOptions) -> Result<bool> {
    let mut connection = options.connect().await.map_err(connect_error)?;
    let runs: bool = sqlx::query_scalar("SELECT current_setting('autovacuum')::bool")
        .fetch_one(&mut connection)
        .await
        .map_err(db)?;
    connection.close().await.map_err(db)?;
    Ok(runs)
}

/// Why row-level security does not bind the role `options` logs in as, if it does not: a
/// superuser or BYPASSRLS role ignores it, and the tables' owner (or a role that may act as the
/// owner) can switch it off. Empty when the role is as ordinary as a serving role should be.
pub async fn row_security_gaps(options: &PgConnectOptions) -> Result<Vec<String>> {
    let mut connection = options.connect().await.map_err(connect_error)?;
    let (superuser, bypasses, owns): (bool, bool, bool) = sqlx::query_as(
        "SELECT r.rolsuper, r.rolbypassrls,
                COALESCE((SELECT pg_has_role(current_user, c.relowner, 'MEMBER')
                          FROM pg_class c
                          WHERE c.oid = to_regclass('instances')), false)
         FROM pg_roles r WHERE r.rolname = current_user",
    )
    .fetch_one(&mut connection)
    .await
    .map_err(db)?;
    connection.close().await.map_err(db)?;
    let role = options.get_username();
    let gaps = [
        (
            superuser,
            format!("{role} is a superuser, which ignores row-level security"),
        ),
        (
            bypasses,
            format!("{role} has BYPASSRLS, which ignores row-level security"),
        ),
        (
            owns,
            format!(
                "{role} owns the tables (or may act as their owner), so it could switch row-level security off"
            ),
        ),
    ];
    Ok(gaps
        .into_iter()
        .filter_map(|(gap, why)| gap.then_some(why))
        .collect())
}

/// What the role a URL logs in as may do with the system scope, `'*'` (migration 0011).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossTenant {
    /// Not a member of `sutra_system`: `'*'` shows it no row. Right for a serving role; a
    /// replica whose system work ran as it would sweep, dispatch and send nothing.
    Refused,
    /// A member of `sutra_system`: `'*'` shows it every tenant's rows.
    Member,
    /// A superuser or BYPASSRLS role, which every tenant's rows are open to anyway.
    Unbound,
}

/// Whether the role `options` logs in as may act for the system. A database whose schema
/// predates the group has no `sutra_system` yet: every role is refused there.
pub async fn cross_tenant(options: &PgConnectOptions) -> Result<CrossTenant> {
    let mut connection = options.connect().await.map_err(connect_error)?;
    let (unbound, member): (bool, bool) = sqlx::query_as(
        "SELECT r.rolsuper OR r.rolbypassrls,
                CASE WHEN EXISTS (SELECT FROM pg_roles WHERE rolname = 'sutra_system')
                     THEN pg_has_role(current_user, 'sutra_system', 'USAGE')
                     ELSE false END
         FROM pg_roles r WHERE r.rolname = current_user",
    )
    .fetch_one(&mut connection)
    .await
    .map_err(db)?;
    connection.close().await.map_err(db)?;
    Ok(match (unbound, member) {
        (true, _) => CrossTenant::Unbound,
        (false, true) => CrossTenant::Member,
        (false, false) => CrossTenant::Refused,
    })
}
