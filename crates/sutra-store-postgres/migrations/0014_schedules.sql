-- Schedules (issue 34, docs/design/time-and-undo.md §2.3): one row per scheduled flow of a
-- deployment's active version — when it fires next, what it fired last, whether an operator
-- paused it. An activation syncs a version's rows (a newer version's replace an older's, keeping
-- `paused` and the last fire); the `scheduler` role's leader scans the due ones across tenants
-- and advances each, guarded by the `next_at` it read. Times are microseconds, as everywhere.
CREATE TABLE schedules (
    tenant        text    NOT NULL,
    deployment    text    NOT NULL,
    flow          text    NOT NULL,
    version       bigint  NOT NULL,  -- the deployment version whose flow it starts
    expression    text    NOT NULL,  -- as written: `cron 0 2 * * *`, `every PT15M`
    zone          text    NOT NULL,
    next_at       bigint  NOT NULL,  -- the next tick to fire
    last_at       bigint,            -- the last tick fired, and the instance it started
    last_instance text,
    paused        boolean NOT NULL DEFAULT false,
    PRIMARY KEY (tenant, deployment, flow),
    CONSTRAINT schedules_tenant_named CHECK (tenant NOT IN ('', '*'))
);
-- The scheduler's scan: unpaused rows, earliest first.
CREATE INDEX schedules_due ON schedules (next_at) WHERE NOT paused;

-- Row-level security as on every tenant's table (0001, 0011): a tenant's transaction reads and
-- writes its own rows; the system scope, as a member of `sutra_system`, reads, updates and
-- deletes every tenant's and inserts none.
ALTER TABLE schedules ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_reads ON schedules FOR SELECT USING (tenant = sutra_tenant());
CREATE POLICY tenant_inserts ON schedules FOR INSERT WITH CHECK (tenant = sutra_tenant());
CREATE POLICY tenant_updates ON schedules FOR UPDATE
    USING (tenant = sutra_tenant()) WITH CHECK (tenant = sutra_tenant());
CREATE POLICY tenant_deletes ON schedules FOR DELETE USING (tenant = sutra_tenant());
CREATE POLICY system_reads ON schedules FOR SELECT TO sutra_system
    USING (sutra_tenant() = '*');
CREATE POLICY system_updates ON schedules FOR UPDATE TO sutra_system
    USING (sutra_tenant() = '*') WITH CHECK (sutra_tenant() = '*');
CREATE POLICY system_deletes ON schedules FOR DELETE TO sutra_system
    USING (sutra_tenant() = '*');

-- The grants the default privileges of 0002 and 0011 give a table their migrator creates, said
-- outright: a schema migrated by another owner since gets them too.
GRANT SELECT, INSERT, UPDATE, DELETE ON schedules TO sutra_app;
GRANT SELECT, UPDATE, DELETE ON schedules TO sutra_system;
