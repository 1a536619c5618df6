-- Schedules (issue 34, docs/design/time-and-undo.md §2.3): one row per scheduled flow of a
-- deployment's active version — when it fires next, what it fired last, whether an operator
-- paused it. An activation syncs a version's rows (a newer version's replace an older's, keeping
-- `paused` and the last fire); the scheduler scans the due ones and advances each, guarded by the
-- `next_at` it read.
CREATE TABLE schedules (
    tenant        TEXT    NOT NULL,
    deployment    TEXT    NOT NULL,
    flow          TEXT    NOT NULL,
    version       INTEGER NOT NULL,  -- the deployment version whose flow it starts
    expression    TEXT    NOT NULL,  -- as written: `cron 0 2 * * *`, `every PT15M`
    zone          TEXT    NOT NULL,
    next_at       INTEGER NOT NULL,  -- the next tick to fire
    last_at       INTEGER,           -- the last tick fired, and the instance it started
    last_instance TEXT,
    paused        INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, deployment, flow)
);
-- The scheduler's scan: unpaused rows, earliest first.
CREATE INDEX schedules_due ON schedules (next_at) WHERE paused = 0;
