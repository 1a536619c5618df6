-- Sutra's schema on SQLite. Times are INTEGER microseconds since the Unix epoch, as the
-- PostgreSQL store keeps them in BIGINT; JSON is TEXT. Every table carries `tenant`, and every
-- read filters on it.

CREATE TABLE deployments (
    tenant     TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    status     TEXT    NOT NULL,  -- active | draining | retired
    source     TEXT    NOT NULL,  -- the YAML as deployed
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, name, version)
);

CREATE TABLE instances (
    id         TEXT    PRIMARY KEY,  -- UUIDv7: sorts by creation, so it is the keyset cursor
    tenant     TEXT    NOT NULL,
    deployment TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    flow       TEXT    NOT NULL,
    status     TEXT    NOT NULL,     -- mirrors snapshot.status, for listing and counting
    snapshot   TEXT    NOT NULL,
    owner      TEXT,                 -- opaque: compared, never parsed
    claimed_at INTEGER,              -- NULL exactly when owner is NULL
    fence      INTEGER NOT NULL DEFAULT 0,
    recoveries INTEGER NOT NULL DEFAULT 0,  -- consecutive sweeps that cleared the claim
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX instances_by_status ON instances (tenant, status, id);
CREATE INDEX instances_by_flow ON instances (tenant, flow, id);
-- The sweep looks for old claims only.
CREATE INDEX instances_by_claim ON instances (claimed_at) WHERE claimed_at IS NOT NULL;

-- Correlation aliases: at most one instance waits on a (tenant, channel, key).
CREATE TABLE waits (
    tenant   TEXT    NOT NULL,
    channel  TEXT    NOT NULL,
    key      TEXT    NOT NULL,
    instance TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    park     INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel, key)
);
CREATE INDEX waits_by_park ON waits (instance, park);

-- Internal deliveries (SPEC §5.6): asked before the claim, taken by the step's commit.
CREATE TABLE deliveries (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: an id names one delivery
    tenant     TEXT    NOT NULL,
    instance   TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    park       INTEGER NOT NULL,
    kind       TEXT    NOT NULL,
    payload    TEXT    NOT NULL,
    due_at     INTEGER NOT NULL,
    attempts   INTEGER NOT NULL DEFAULT 0,  -- claimants refused so far
    created_at INTEGER NOT NULL
);
CREATE INDEX deliveries_by_due ON deliveries (due_at, id);
CREATE INDEX deliveries_by_park ON deliveries (instance, park);

-- External tasks (SPEC §5.5). The id is `{instance}:{park}`: a park has at most one task.
CREATE TABLE tasks (
    id           TEXT    PRIMARY KEY,
    tenant       TEXT    NOT NULL,
    instance     TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    park         INTEGER NOT NULL,
    topic        TEXT    NOT NULL,
    input        TEXT    NOT NULL,
    state        TEXT    NOT NULL,  -- available | locked | completed | failed | terminal | cancelled
    attempt      INTEGER NOT NULL,  -- which attempt the next lock is, from 1
    retries      INTEGER NOT NULL,
    backoff_us   INTEGER NOT NULL,
    lock_us      INTEGER NOT NULL,
    lock_token   TEXT,
    locked_until INTEGER,
    available_at INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX tasks_by_topic ON tasks (topic, state, available_at);
CREATE INDEX tasks_by_park ON tasks (instance, park);

-- Consumed messages, for dedup: (tenant, channel, event id) answers as it was first answered.
CREATE TABLE inbox (
    tenant      TEXT    NOT NULL,
    channel     TEXT    NOT NULL,
    event_id    TEXT    NOT NULL,
    instance    TEXT,              -- NULL while the message is only buffered
    status      TEXT    NOT NULL,
    received_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, channel, event_id)
);

-- Early messages kept for a `receive` that has not parked yet (channel `buffer`).
CREATE TABLE buffered (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,  -- arrival order: the oldest matches first
    tenant     TEXT    NOT NULL,
    channel    TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    event_id   TEXT    NOT NULL,
    message    TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX buffered_by_key ON buffered (tenant, channel, key, id);

-- Outbound messages (SPEC §5.4), written by the step, sent after its commit.
CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant          TEXT    NOT NULL,
    instance        TEXT    NOT NULL,  -- no foreign key: a row outlives a purged instance
    deployment      TEXT    NOT NULL,
    version         INTEGER NOT NULL,
    channel         TEXT    NOT NULL,
    payload         TEXT    NOT NULL,
    message_key     TEXT,
    idempotency_key TEXT    NOT NULL UNIQUE,  -- `{instance}:{audit seq}:{node}`
    attempts        INTEGER NOT NULL DEFAULT 0,
    claimed_at      INTEGER,
    sent_at         INTEGER,
    poisoned        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    created_at      INTEGER NOT NULL
);
CREATE INDEX outbox_pending ON outbox (next_attempt_at) WHERE sent_at IS NULL AND poisoned = 0;
CREATE INDEX outbox_by_instance ON outbox (instance, id);

-- The audit trail: one row per event, the instance's sequence as key, so a repeat cannot land.
CREATE TABLE history (
    tenant   TEXT    NOT NULL,
    instance TEXT    NOT NULL REFERENCES instances (id) ON DELETE CASCADE,
    seq      INTEGER NOT NULL,
    at       INTEGER NOT NULL,
    kind     TEXT    NOT NULL,
    node     TEXT,
    token    INTEGER,
    detail   TEXT    NOT NULL,
    PRIMARY KEY (instance, seq)
);
