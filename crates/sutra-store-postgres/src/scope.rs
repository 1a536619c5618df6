//! Every statement runs in a transaction that first declares whom it acts for, because row-level
//! security shows a transaction nothing until it has: `set_config('sutra.tenant', …, true)` lasts
//! until the transaction ends, so a pooled connection never carries one tenant into another's
//! work.
//!
//! The declaration rides in the `BEGIN` itself (one simple-protocol message, two statements), so
//! a scoped transaction costs no more round trips than a bare one. That message cannot carry bind
//! parameters, so the tenant travels as a literal, quoted by [`literal`].
//!
//! [`Scope::System`] is the store's own cross-tenant work (sweep, due deliveries, outbox
//! sending), whose trait methods name no tenant: it may read, update and delete every tenant's
//! rows, never insert — and only as a member of `sutra_system`, which is why it runs in a pool
//! of its own (migration 0011, decision 0040). Declared by any other role, `'*'` shows nothing.

use std::time::Duration;

use sqlx::{AssertSqlSafe, PgPool, Postgres, Transaction};
use sutra_store::{Error, Result};
pub use sutra_store_sql::Scope;

use crate::codec::db;

/// The value of `sutra.tenant` that [`Scope::System`] declares. The schema refuses it as a
/// tenant name.
pub(crate) const SYSTEM: &str = "*";

pub type Tx = Transaction<'static, Postgres>;

/// Whether a transaction's commit waits until its WAL is flushed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flush {
    /// The commit is answered once durable: everything but redoable work.
    Wait,
    /// `synchronous_commit = off` for this transaction alone: the commit is answered at once and
    /// flushed by the WAL writer shortly after. A crash of the database can lose it — never
    /// partly, and never once a later durable commit has been answered, since the WAL is flushed
    /// in order.
    Later,
}

/// Takes a pooled connection and begins a transaction scoped to `scope`, each of whose
/// statements is cancelled once it has run for `bound`, if given: `SET LOCAL`, riding in the
/// `BEGIN` like the declaration, so that the bound costs no round trip and ends with the
/// transaction (decision 0048).
pub async fn begin(
    pool: &PgPool,
    scope: Scope<'_>,
    flush: Flush,
    bound: Option<Duration>,
) -> Result<Tx> {
    let tenant = match scope {
        Scope::Tenant(tenant) => tenant,
        Scope::System => SYSTEM,
    };
    let unflushed = match flush {
        Flush::Wait => "",
        Flush::Later => "; SET LOCAL synchronous_commit = off",
    };
    let statement = format!("BEGIN; {}{unflushed}{}", declare(tenant)?, bounded(bound));
    // Safe: the only dynamic part is a literal quoted by `literal`.
    pool.begin_with(AssertSqlSafe(statement)).await.map_err(db)
}

/// The statements that scope the implicit transaction PostgreSQL runs a simple-protocol message
/// of several statements in (it ends with the message) as [`begin`] scopes an explicit one, and
/// in the same words: whom it acts for ([`declare`], whose one row comes first), and its
/// statements' bound. A setting made `LOCAL` lasts until that transaction ends.
pub(crate) fn implicit_scope(tenant: &str, bound: Option<Duration>) -> Result<String> {
    Ok(format!("{}{}", declare(tenant)?, bounded(bound)))
}

/// The `SET LOCAL` of a transaction's statement bound after a `;`, if it has one: in
/// milliseconds, at least one (zero would mean no bound at all).
fn bounded(bound: Option<Duration>) -> String {
    bound.map_or(String::new(), |bound| {
        format!(
            "; SET LOCAL statement_timeout = {}",
            bound.as_millis().max(1)
        )
    })
}

/// The statement that declares whom the transaction acts for, from here until it ends (or until
/// a rollback to a savepoint taken before it).
pub(crate) fn declare(tenant: &str) -> Result<String> {
    Ok(format!(
        "SELECT set_config('sutra.tenant', {}, true)",
        literal(tenant)?
    ))
}

/// `text` as an escape-string literal (`E'…'`), which reads backslashes as escapes whatever
/// `standard_conforming_strings` says, so escaping both `\` and `'` leaves no way out of the
/// literal. A NUL cannot be in any PostgreSQL text, so no tenant can contain one.
pub(crate) fn literal(text: &str) -> Result<String> {
    if text.contains('\0') {
        return Err(Error::Corrupt(format!(
            "a text with a NUL character, which PostgreSQL cannot hold: {text:?}"
        )));
    }
    Ok(format!(
        "E'{}'",
        text.replace('\\', "\\\\").replace('\'', "\\'")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        assert_eq!(literal("acme").unwrap(), "E'acme'");
        assert_eq!(literal(r"a'b\c").unwrap(), r"E'a\'b\\c'");
        assert_eq!(literal(r"\'; --").unwrap(), r"E'\\\'; --'");
        assert!(literal("a\0b").is_err());
    }
}
