-- The role replicas serve as (docs/decisions/0019-tenancy-and-tokens.md).
--
-- Row-level security binds a role only while that role cannot turn it off: the tables' owner can
-- (ALTER TABLE … DISABLE ROW LEVEL SECURITY, DROP POLICY), and superusers and BYPASSRLS roles
-- ignore it. So the schema belongs to the role that migrates it, and replicas log in as a role
-- that is a member of the group `sutra_app`, which owns nothing and may only read and write rows.
-- TRUNCATE is not granted: it empties a table past every policy.

-- The group, unless an operator made it already. Making it needs CREATEROLE; an owner without it
-- is told what to run. A migrator of another database on the same cluster may be making it at
-- the same moment: either one's role is as good.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'sutra_app') THEN
        CREATE ROLE sutra_app NOLOGIN;
    END IF;
EXCEPTION
    WHEN duplicate_object OR unique_violation THEN NULL;
    WHEN insufficient_privilege THEN
        RAISE EXCEPTION 'the group role sutra_app does not exist, and % may not create it',
                        current_user
            USING HINT = 'as a superuser, run CREATE ROLE sutra_app NOLOGIN; then migrate again';
END
$$;

-- Rows of every table there is and every table a later migration makes (default privileges
-- cover tables this role creates from now on), in the schema the migrations run in.
DO $$
DECLARE
    schema constant text := current_schema();
BEGIN
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO sutra_app', schema);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO sutra_app',
                   schema);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA %I TO sutra_app', schema);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I
                        GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO sutra_app', schema);
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I
                        GRANT USAGE, SELECT ON SEQUENCES TO sutra_app', schema);
END
$$;

-- A replica reads which migrations are applied (to know the schema is current) and records none.
REVOKE INSERT, UPDATE, DELETE ON _sqlx_migrations FROM sutra_app;
