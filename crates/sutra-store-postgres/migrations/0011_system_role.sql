-- The store's cross-tenant work — the sweep, due deliveries, outbox sending, leases, the purger,
-- the retirement gate, startup's deployment load — runs under a role of its own
-- (docs/decisions/0040-a-role-for-cross-tenant-work.md).
--
-- Until now any transaction could declare '*' and read every tenant's rows: a guard against the
-- store's own bugs, not against whoever holds the serving role's credentials. From here '*' shows
-- rows only to members of the group `sutra_system`: the policies that honour it apply TO that
-- group alone, so for any other role '*' is a tenant name no row has. A replica logs in twice —
-- as a member of `sutra_app` for tenants' work and as a member of `sutra_system` for its own
-- (`sutra.store.system-url`) — or, where an operator accepts the old exposure, as one role in
-- both groups.

-- The group, unless an operator made it already (as 0002 makes `sutra_app`).
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sutra_system') THEN
        CREATE ROLE sutra_system NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
    WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'the group role sutra_system does not exist, and % may not create it',
                        current_user
            USING HINT = 'as a superuser, run CREATE ROLE sutra_system NOLOGIN; then migrate again';
END
$$;

-- The system scope reads, updates and deletes; it inserts nothing but leases (a lease is no
-- tenant's row). Row security already refused its inserts into tenants' tables; now the grants
-- say so too.
DO $$
DECLARE
    schema constant text := current_schema();
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO sutra_system', schema);
    EXECUTE format('GRANT SELECT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO sutra_system',
                   schema);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I
                        GRANT SELECT, UPDATE, DELETE ON TABLES TO sutra_system', schema);
END
$$;
GRANT INSERT ON leases TO sutra_system;
REVOKE UPDATE, DELETE ON _sqlx_migrations FROM sutra_system;

-- A tenant's policies match its own rows only; the system's match every row, for members of
-- `sutra_system` only. Policies of one command are OR-ed, and a policy TO a group applies only
-- to that group's members: a serving role's query plans with `tenant = sutra_tenant()` alone.
DO $$
DECLARE
    t text;
    mine constant text := 'tenant = sutra_tenant()';
    system constant text := 'sutra_tenant() = ''*''';
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'deployments', 'instances', 'waits', 'deliveries', 'tasks', 'inbox', 'buffered', 'outbox',
        'history'
    ] LOOP
        EXECUTE format('ALTER POLICY tenant_reads ON %I USING (%s)', t, mine);
        EXECUTE format('ALTER POLICY tenant_updates ON %I USING (%s) WITH CHECK (%s)',
                       t, mine, mine);
        EXECUTE format('ALTER POLICY tenant_deletes ON %I USING (%s)', t, mine);
        EXECUTE format('CREATE POLICY system_reads ON %I FOR SELECT TO sutra_system USING (%s)',
                       t, system);
        EXECUTE format('CREATE POLICY system_updates ON %I FOR UPDATE TO sutra_system
                            USING (%s) WITH CHECK (%s)', t, system, system);
        EXECUTE format('CREATE POLICY system_deletes ON %I FOR DELETE TO sutra_system USING (%s)',
                       t, system);
    END LOOP;
END
$$;

ALTER POLICY system_reads ON leases TO sutra_system;
ALTER POLICY system_inserts ON leases TO sutra_system;
ALTER POLICY system_updates ON leases TO sutra_system;
ALTER POLICY system_deletes ON leases TO sutra_system;
