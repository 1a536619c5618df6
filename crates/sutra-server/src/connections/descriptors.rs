//! How many HTTP connections fit in the process's file-descriptor limit (`RLIMIT_NOFILE`, what
//! `ulimit -n` sets) beside what the rest of the process may hold open: the store's pools, the
//! brokers' connections, the outbox's sends and the process's own files (decision 0075).

use rustix::process::{Resource, getrlimit};

/// The most connections a cap derived from the limit allows. Beyond a few thousand, a replica
/// is not what a client waits on; an idle connection still costs hyper's buffers. An operator
/// who needs more sets `sutra.http.max-connections`, which the limit alone bounds.
pub const DERIVED_MAX: u32 = 4096;

/// What the process holds open besides its HTTP connections: the standard streams, the
/// runtime's poll and wakers, the signal pipes, the listener and the one connection accepted
/// while it waits for a slot, the tokens file, DNS look-ups — 25 in all measured on an idle
/// replica on SQLite — with room to spare.
const PROCESS: u64 = 64;

/// sqlx's SQLite pool: ten connections, each holding the database, its WAL and its
/// shared-memory index open.
const SQLITE: u64 = 10 * 3;

/// Each PostgreSQL store listens for its deployment and end notices on a connection apiece,
/// beside its pools.
const POSTGRES_LISTENERS: u64 = 2;

/// A broker's publishing connection and its consumers'.
const PER_BROKER: u64 = 2;

/// What the rest of the process may hold open at once, from its configuration.
pub struct Reserve<'a> {
    pub datasource: &'a str,
    pub pool_size: u32,
    /// PostgreSQL: the store's cross-tenant work has a pool of its own (`sutra.store.system-url`).
    pub system_pool: bool,
    /// Webhook sends run a batch at a time, each on a connection of its own.
    pub outbox_batch: u32,
    pub brokers: usize,
}

impl Reserve<'_> {
    pub fn descriptors(&self) -> u64 {
        let store = if self.datasource.starts_with("sqlite:") {
            SQLITE
        } else {
            let pools = if self.system_pool { 2 } else { 1 };
            pools * u64::from(self.pool_size) + POSTGRES_LISTENERS
        };
        let brokers = PER_BROKER * u64::try_from(self.brokers).unwrap_or(u64::MAX);
        PROCESS
            .saturating_add(store)
            .saturating_add(u64::from(self.outbox_batch))
            .saturating_add(brokers)
    }
}

/// The process's file-descriptor limit and what of it is reserved.
#[derive(Debug, Clone, Copy)]
pub struct Descriptors {
    /// The soft limit; `None`: unlimited.
    limit: Option<u64>,
    reserved: u64,
}

impl Descriptors {
    pub fn new(limit: Option<u64>, reserved: u64) -> Descriptors {
        Descriptors { limit, reserved }
    }

    /// This process's soft limit, which is what `accept` runs into.
    pub fn of_this_process(reserved: u64) -> Descriptors {
        Descriptors::new(getrlimit(Resource::Nofile).current, reserved)
    }

    /// The cap when `sutra.http.max-connections` is unset: what the limit leaves, at most
    /// [`DERIVED_MAX`].
    pub fn derived_cap(&self) -> Result<u32, String> {
        match self.room() {
            None => Ok(DERIVED_MAX),
            Some(0) => Err(format!(
                "{}, which leaves no room for connections: raise the limit",
                self.describe()
            )),
            Some(room) => Ok(u32::try_from(room).map_or(DERIVED_MAX, |room| room.min(DERIVED_MAX))),
        }
    }

    /// `cap` if that many connections fit beside the reserve.
    pub fn fit(&self, cap: u32) -> Result<u32, String> {
        match self.room() {
            Some(room) if u64::from(cap) > room => Err(format!(
                "{}: set at most {room}, or raise the limit",
                self.describe()
            )),
            _ => Ok(cap),
        }
    }

    /// Descriptors the limit leaves for connections; `None`: no limit.
    fn room(&self) -> Option<u64> {
        self.limit.map(|limit| limit.saturating_sub(self.reserved))
    }

    fn describe(&self) -> String {
        let limit = self.limit.map_or("unlimited".to_owned(), |l| l.to_string());
        format!(
            "the process may open {limit} files (RLIMIT_NOFILE, `ulimit -n`) and keeps up to {} \
             of them for its store, brokers, outbox sends and own files",
            self.reserved
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_cap_is_what_the_limit_leaves_at_most_the_ceiling() {
        assert_eq!(Descriptors::new(Some(1024), 194).derived_cap(), Ok(830));
        assert_eq!(
            Descriptors::new(Some(1 << 20), 194).derived_cap(),
            Ok(DERIVED_MAX)
        );
        assert_eq!(Descriptors::new(None, 194).derived_cap(), Ok(DERIVED_MAX));
        let error = Descriptors::new(Some(100), 194).derived_cap().unwrap_err();
        assert!(error.contains("may open 100 files"), "{error}");
    }

    #[test]
    fn a_cap_fits_only_beside_the_reserve() {
        let descriptors = Descriptors::new(Some(1024), 194);
        assert_eq!(descriptors.fit(830), Ok(830));
        let error = descriptors.fit(831).unwrap_err();
        assert!(error.contains("set at most 830"), "{error}");
        assert_eq!(Descriptors::new(None, 194).fit(100_000), Ok(100_000));
    }

    #[test]
    fn the_reserve_counts_the_stores_pools_the_outbox_and_the_brokers() {
        let sqlite = Reserve {
            datasource: "sqlite://sutra.db",
            pool_size: 10,
            system_pool: false,
            outbox_batch: 100,
            brokers: 0,
        };
        assert_eq!(sqlite.descriptors(), 64 + 30 + 100);
        let postgres = Reserve {
            datasource: "postgres://db/sutra",
            pool_size: 20,
            system_pool: true,
            outbox_batch: 100,
            brokers: 2,
        };
        assert_eq!(postgres.descriptors(), 64 + 2 * 20 + 2 + 100 + 2 * 2);
    }
}
