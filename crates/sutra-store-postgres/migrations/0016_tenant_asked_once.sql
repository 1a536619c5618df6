-- Every policy asks for the transaction's tenant once per statement (decision 0064).
--
-- `tenant = sutra_tenant()` inlines to `current_setting('sutra.tenant', true)`, a stable call
-- the executor evaluates for every row a scan filters (an index condition evaluates it once per
-- scan, a filter once per row): a count over 100,000 index entries paid it twice per entry,
-- which tripled the scaling gauges' counts under the policies (docs/performance.md, "The scrape
-- at volume"). Written `(SELECT sutra_tenant())`, it is an init plan: evaluated once, its value a
-- parameter that an index condition or a one-time filter uses as it would a constant. The rows
-- each policy matches are the same.
DO $$
DECLARE
    t text;
    mine constant text := 'tenant = (SELECT sutra_tenant())';
    system constant text := '(SELECT sutra_tenant()) = ''*''';
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'deployments', 'instances', 'waits', 'deliveries', 'tasks', 'inbox', 'buffered', 'outbox',
        'history', 'schedules'
    ] LOOP
        EXECUTE format('ALTER POLICY tenant_reads ON %I USING (%s)', t, mine);
        EXECUTE format('ALTER POLICY tenant_inserts ON %I WITH CHECK (%s)', t, mine);
        EXECUTE format('ALTER POLICY tenant_updates ON %I USING (%s) WITH CHECK (%s)',
                       t, mine, mine);
        EXECUTE format('ALTER POLICY tenant_deletes ON %I USING (%s)', t, mine);
        EXECUTE format('ALTER POLICY system_reads ON %I USING (%s)', t, system);
        EXECUTE format('ALTER POLICY system_updates ON %I USING (%s) WITH CHECK (%s)',
                       t, system, system);
        EXECUTE format('ALTER POLICY system_deletes ON %I USING (%s)', t, system);
    END LOOP;
END
$$;

ALTER POLICY system_reads ON leases USING ((SELECT sutra_tenant()) = '*');
ALTER POLICY system_inserts ON leases WITH CHECK ((SELECT sutra_tenant()) = '*');
ALTER POLICY system_updates ON leases
    USING ((SELECT sutra_tenant()) = '*') WITH CHECK ((SELECT sutra_tenant()) = '*');
ALTER POLICY system_deletes ON leases USING ((SELECT sutra_tenant()) = '*');
