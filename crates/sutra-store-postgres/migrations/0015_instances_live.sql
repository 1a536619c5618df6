-- The scaling signal counts the instances that can still move — created, suspended, failed —
-- exactly, at every scrape of /metrics and GET /v1/scaling (decision 0057). `instances_by_status`
-- (tenant, status, id) holds every instance, the ended ones too, which grow without bound: the
-- count read all of it, or the table. This index holds the live rows only. `tenant` is in it for
-- the row-level security policies' condition, so that the count reads the index alone.
CREATE INDEX instances_live ON instances (status, tenant)
    WHERE status IN ('created', 'suspended', 'failed');
