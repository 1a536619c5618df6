-- Leader election (SPEC §6) and the history purger (docs/decisions/0018-leases-and-roles.md).

-- One row per role. A release lets the lease expire and keeps the row, so that the epoch only
-- ever grows. Leases belong to the fleet, not to a tenant: their `tenant` is always '*', the
-- name the store's system transactions declare, and only those read or write them — a tenant's
-- transaction sees no lease and can take none. (The system scope inserts no tenant's rows; a
-- lease is no tenant's row.)
CREATE TABLE leases (
    tenant     text   NOT NULL DEFAULT '*' CONSTRAINT leases_tenant_system CHECK (tenant = '*'),
    role       text   PRIMARY KEY,  -- `timers`, `instance-sweeper`, …, `channel:{tenant}:{name}`
    holder     text   NOT NULL,     -- a replica id
    expires_at bigint NOT NULL,     -- by sutra_now()
    epoch      bigint NOT NULL      -- grows by one whenever the holder changes
);
ALTER TABLE leases ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY system_reads ON leases FOR SELECT USING (sutra_tenant() = '*');
CREATE POLICY system_inserts ON leases FOR INSERT WITH CHECK (sutra_tenant() = '*');
CREATE POLICY system_updates ON leases FOR UPDATE
    USING (sutra_tenant() = '*') WITH CHECK (sutra_tenant() = '*');
CREATE POLICY system_deletes ON leases FOR DELETE USING (sutra_tenant() = '*');

-- The history purger finds old terminal instances, expired buffered messages and long-sent
-- outbox rows, and deletes the inbox rows of the instances it purges.
CREATE INDEX instances_purgeable ON instances (updated_at)
    WHERE status IN ('completed', 'cancelled');
CREATE INDEX buffered_by_expiry ON buffered (expires_at);
CREATE INDEX outbox_sent ON outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE INDEX inbox_by_instance ON inbox (instance) WHERE instance IS NOT NULL;
