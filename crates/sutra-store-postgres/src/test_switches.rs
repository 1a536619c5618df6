//! Test-only switches, read from the environment, that break a guarantee on purpose so that the
//! history checker's tests (crates/sutra-cli/tests/history.rs) can prove the checker finds the
//! anomaly. No deployment sets them; unset, each costs nothing after the first build of the statement it would rewrite.
//!
//! - `SUTRA_TEST_SKIP_FENCE=1`: a step's commit does not check the fence (nor the owner) its
//!   claim read. Skipping the fence alone would change nothing on this store: a lane's claim is
//!   the row lock of its step's transaction (decision 0024), held until the commit, so no other
//!   claim can take the row in between, and a second commit on one audit sequence would break
//!   the history's primary key. So under the switch the claim reads the row without locking it
//!   or asking who holds it, the fenced update matches whatever fence it finds, and history rows
//!   whose sequence numbers are taken already are dropped: two steps that read one fence both
//!   commit, as they would with a fence nobody checked.
//! - `SUTRA_TEST_STEAL_LOCKS=1`: a poll takes a locked task whatever its lock's expiry, so that
//!   a task held by one worker is handed to another: two locks held at once.
//!
//! It exists only with the `test-hooks` feature, which only test builds enable (through
//! `sutra-server`'s): without it each function is the identity, and the variable's name is not
//! in the binary.

/// The statement of a lane's claim (`lock_claimable`).
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn lock_claimable(sql: &str) -> String {
    sql.to_owned()
}

/// The statement of a settle's rows (the fenced update and what lands with it).
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn settle(sql: String) -> String {
    sql
}

/// Whether a group's plain steps are written one by one, each through its own statement (a
/// settle's is [`settle`]'s), rather than in one statement per kind.
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn plain_one_by_one() -> bool {
    false
}

/// The statement of a poll's locks (`lock_tasks`).
#[cfg(not(feature = "test-hooks"))]
#[inline(always)]
pub(crate) fn lock_tasks(sql: &str) -> String {
    sql.to_owned()
}

#[cfg(feature = "test-hooks")]
pub(crate) use switched::{lock_claimable, lock_tasks, plain_one_by_one, settle};

#[cfg(feature = "test-hooks")]
mod switched {
    fn skip_fence() -> bool {
        std::env::var("SUTRA_TEST_SKIP_FENCE").is_ok_and(|value| value == "1")
    }

    /// Without the row lock and without the holder's predicate: the claim always reads.
    pub(crate) fn lock_claimable(sql: &str) -> String {
        if !skip_fence() {
            return sql.to_owned();
        }
        let loosened = sql
            .replace(
                "AND (owner IS NULL OR owner = $1 OR claimed_at < sutra_now() - $4)",
                "AND ($1::text IS NOT NULL OR $4::bigint IS NOT NULL OR true)",
            )
            .replace("FOR NO KEY UPDATE SKIP LOCKED", "");
        assert_ne!(
            loosened, sql,
            "the claim's statement changed: update the switch"
        );
        loosened
    }

    /// Under the fence switch, a group's settles take [`settle`]'s loosened statement.
    pub(crate) fn plain_one_by_one() -> bool {
        skip_fence()
    }

    /// The fenced update matches any fence and owner; history rows already there are dropped.
    pub(crate) fn settle(sql: String) -> String {
        if !skip_fence() {
            return sql;
        }
        let loosened = sql
            .replace(
                "AND ($5::text IS NULL OR owner = $5) AND fence = $6",
                "AND ($5::text IS NULL OR $5::text IS NOT NULL) AND $6::bigint IS NOT NULL",
            )
            .replace(
                "AS event (seq, at, kind, node, token, detail)),",
                "AS event (seq, at, kind, node, token, detail)
                 ON CONFLICT (instance, seq) DO NOTHING),",
            );
        assert_ne!(
            loosened, sql,
            "the settle's statement changed: update the switch"
        );
        loosened
    }

    /// A locked task is taken whether or not its lock expired.
    pub(crate) fn lock_tasks(sql: &str) -> String {
        if !std::env::var("SUTRA_TEST_STEAL_LOCKS").is_ok_and(|value| value == "1") {
            return sql.to_owned();
        }
        let loosened = sql.replace(
            "AND state = 'locked' AND locked_until <= sutra_now()",
            "AND state = 'locked'",
        );
        assert_ne!(
            loosened, sql,
            "the poll's statement changed: update the switch"
        );
        loosened
    }
}
