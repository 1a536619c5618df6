-- Leader election (SPEC §6): one row per role. A release lets the lease expire and keeps the row,
-- so that the epoch only ever grows. Leases belong to the process fleet, not to a tenant.
CREATE TABLE leases (
    role       TEXT    PRIMARY KEY,  -- `timers`, `instance-sweeper`, …, `channel:{tenant}:{name}`
    holder     TEXT    NOT NULL,     -- a replica id
    expires_at INTEGER NOT NULL,
    epoch      INTEGER NOT NULL      -- grows by one whenever the holder changes
);

-- The history purger finds old terminal instances, expired buffered messages and long-sent
-- outbox rows, and deletes the inbox rows of the instances it purges.
CREATE INDEX instances_purgeable ON instances (updated_at)
    WHERE status IN ('completed', 'cancelled');
CREATE INDEX buffered_by_expiry ON buffered (expires_at);
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX inbox_by_instance ON inbox (instance) WHERE instance IS NOT NULL;
