-- Sutra's schema on PostgreSQL: the SQLite schema's twin, shared by every replica.
--
-- Times are BIGINT microseconds since the Unix epoch, as SQLite keeps them, so that claim and
-- lease arithmetic is the same on both. Wherever the store needs "now" it asks the database
-- (sutra_now()), never a replica: claims, sweeps, outbox claims and task locks taken by
-- different replicas compare against one clock. JSON is JSONB (docs/decisions/0015).
--
-- Every table carries `tenant`, and row-level security (at the end) shows a transaction only the
-- rows of the tenant it declared with set_config('sutra.tenant', …, true).

-- The database's clock, to the microsecond. clock_timestamp(), not now(): now() is frozen at the
-- start of the transaction. Declared STABLE although the clock moves: any instant during a
-- statement is a fine "now" for it, and STABLE lets an index scan compare against it
-- (`due_at <= sutra_now()`), which a VOLATILE function, re-evaluated for each row, cannot.
CREATE FUNCTION sutra_now() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint $$;

-- `span` microseconds after sutra_now(), saturating at a century: a lock or a backoff that long
-- is forever, and the sum can neither overflow nor leave the range of times the store reads back.
CREATE FUNCTION sutra_after(span bigint) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT sutra_now() + LEAST(GREATEST(span, 0), 3155760000000000) $$;

-- The tenant the current transaction acts for: NULL or '' when none was declared (then no row
-- is visible), '*' for the engine's own cross-tenant work (sweeps, dispatch, outbox).
CREATE FUNCTION sutra_tenant() RETURNS text
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT current_setting('sutra.tenant', true) $$;

CREATE TABLE deployments (
    tenant     text   NOT NULL,
    name       text   NOT NULL,
    version    bigint NOT NULL,
    status     text   NOT NULL,  -- active | draining | retired
    source     text   NOT NULL,  -- the YAML as deployed
    created_at bigint NOT NULL,
    PRIMARY KEY (tenant, name, version)
);

CREATE TABLE instances (
    id         text   PRIMARY KEY,  -- UUIDv7: sorts by creation, so it is the keyset cursor
    tenant     text   NOT NULL,
    deployment text   NOT NULL,
    version    bigint NOT NULL,
    flow       text   NOT NULL,
    status     text   NOT NULL,     -- mirrors snapshot.status, for listing and counting
    snapshot   jsonb  NOT NULL,
    owner      text,                -- opaque: compared, never parsed
    claimed_at bigint,              -- NULL exactly when owner is NULL
    fence      bigint NOT NULL DEFAULT 0,
    recoveries bigint NOT NULL DEFAULT 0,  -- consecutive sweeps that cleared the claim
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);
CREATE INDEX instances_by_status ON instances (tenant, status, id);
CREATE INDEX instances_by_flow ON instances (tenant, flow, id);
-- The sweep looks for old claims only.
CREATE INDEX instances_by_claim ON instances (claimed_at) WHERE claimed_at IS NOT NULL;

-- Correlation aliases: at most one instance waits on a (tenant, channel, key).
CREATE TABLE waits (
    tenant   text   NOT NULL,
    channel  text   NOT NULL,
    key      text   NOT NULL,
    instance text   NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    park     bigint NOT NULL,
    PRIMARY KEY (tenant, channel, key)
);
CREATE INDEX waits_by_park ON waits (instance, park);

-- Internal deliveries (SPEC §5.6): asked before the claim, taken by the step's commit.
CREATE TABLE deliveries (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- never reused
    tenant     text   NOT NULL,
    instance   text   NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    park       bigint NOT NULL,
    kind       text   NOT NULL,
    payload    jsonb  NOT NULL,
    due_at     bigint NOT NULL,
    attempts   bigint NOT NULL DEFAULT 0,  -- claimants refused so far
    created_at bigint NOT NULL
);
CREATE INDEX deliveries_by_due ON deliveries (due_at, id);
CREATE INDEX deliveries_by_park ON deliveries (instance, park);

-- External tasks (SPEC §5.5). The id is `{instance}:{park}`: a park has at most one task.
CREATE TABLE tasks (
    id           text   PRIMARY KEY,
    tenant       text   NOT NULL,
    instance     text   NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    park         bigint NOT NULL,
    topic        text   NOT NULL,
    input        jsonb  NOT NULL,
    state        text   NOT NULL,  -- available | locked | completed | failed | terminal | cancelled
    attempt      bigint NOT NULL,  -- the attempt a locked task is on, or an available one's next
    retries      bigint NOT NULL,
    backoff_us   bigint NOT NULL,
    lock_us      bigint NOT NULL,
    lock_token   text,             -- random: unguessable proof of the lock
    locked_until bigint,
    worker       text,             -- who took the last lock, named if it expires
    available_at bigint NOT NULL,
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL
);
-- A poll looks within one tenant and topic, oldest available first; a listing pages by id.
CREATE INDEX tasks_by_topic ON tasks (tenant, topic, state, available_at);
CREATE INDEX tasks_by_tenant ON tasks (tenant, id);
CREATE INDEX tasks_by_park ON tasks (instance, park);

-- Consumed messages, for dedup: (tenant, channel, event id) answers as it was first answered.
CREATE TABLE inbox (
    tenant      text   NOT NULL,
    channel     text   NOT NULL,
    event_id    text   NOT NULL,
    instance    text,              -- NULL while the message is only buffered
    status      text   NOT NULL,
    received_at bigint NOT NULL,
    PRIMARY KEY (tenant, channel, event_id)
);

-- Early messages kept for a `receive` that has not parked yet (channel `buffer`).
CREATE TABLE buffered (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- arrival order: oldest first
    tenant     text   NOT NULL,
    channel    text   NOT NULL,
    key        text   NOT NULL,
    event_id   text   NOT NULL,
    message    jsonb  NOT NULL,
    expires_at bigint NOT NULL
);
CREATE INDEX buffered_by_key ON buffered (tenant, channel, key, id);

-- Outbound messages (SPEC §5.4), written by the step, sent after its commit.
CREATE TABLE outbox (
    id              bigint  GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    tenant          text    NOT NULL,
    instance        text    NOT NULL,  -- no foreign key: a row outlives a purged instance
    deployment      text    NOT NULL,
    version         bigint  NOT NULL,
    channel         text    NOT NULL,
    payload         jsonb   NOT NULL,
    message_key     text,
    idempotency_key text    NOT NULL UNIQUE,  -- `{instance}:{audit seq}:{node}`
    attempts        bigint  NOT NULL DEFAULT 0,
    claimed_at      bigint,
    sent_at         bigint,
    poisoned        boolean NOT NULL DEFAULT false,
    last_error      text,
    next_attempt_at bigint  NOT NULL,
    created_at      bigint  NOT NULL
);
CREATE INDEX outbox_pending ON outbox (next_attempt_at, id) WHERE sent_at IS NULL AND NOT poisoned;
CREATE INDEX outbox_by_instance ON outbox (instance, id);

-- The audit trail: one row per event, the instance's sequence as key, so a repeat cannot land.
CREATE TABLE history (
    tenant   text   NOT NULL,
    instance text   NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    seq      bigint NOT NULL,
    at       bigint NOT NULL,
    kind     text   NOT NULL,
    node     text,
    token    bigint,
    detail   jsonb  NOT NULL,
    PRIMARY KEY (instance, seq)
);

-- Row-level security, the same on every table. ENABLE alone would exempt the tables' owner,
-- which is the role the engine migrates with: FORCE holds the owner to the policies too
-- (superusers and BYPASSRLS roles still see everything: the engine must not connect as one).
--
-- A transaction sees, changes and writes the rows of the tenant it declared. The value '*'
-- (set only by the store's cross-tenant paths) reads, updates and deletes any tenant's rows but
-- inserts none: every row is written on behalf of one tenant. No tenant declared: no rows. The
-- tenant names '' and '*' are refused, so neither can ever match a row by equality.
DO $$
DECLARE
    t text;
    mine constant text := 'tenant = sutra_tenant()';
    visible constant text := '(tenant = sutra_tenant() OR sutra_tenant() = ''*'')';
BEGIN
    FOREACH t IN ARRAY ARRAY[
        'deployments', 'instances', 'waits', 'deliveries', 'tasks', 'inbox', 'buffered', 'outbox',
        'history'
    ] LOOP
        EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (tenant NOT IN (%L, %L))',
                       t, t || '_tenant_named', '', '*');
        EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY', t);
        EXECUTE format('CREATE POLICY tenant_reads ON %I FOR SELECT USING (%s)', t, visible);
        EXECUTE format('CREATE POLICY tenant_inserts ON %I FOR INSERT WITH CHECK (%s)', t, mine);
        EXECUTE format('CREATE POLICY tenant_updates ON %I FOR UPDATE USING (%s) WITH CHECK (%s)',
                       t, visible, visible);
        EXECUTE format('CREATE POLICY tenant_deletes ON %I FOR DELETE USING (%s)', t, visible);
    END LOOP;
END
$$;
