-- The task poll's indexes (issue 11): a poll looks only at live tasks — available ones by when
-- they became available, locked ones by when their lock expires. Partial indexes hold only those
-- rows, so a poll's cost does not grow with the table's history; the poll's statements name the
-- states as literals, which is what lets SQLite use a partial index.
CREATE INDEX tasks_available ON tasks (tenant, topic, available_at) WHERE state = 'available';
CREATE INDEX tasks_locked ON tasks (tenant, topic, locked_until) WHERE state = 'locked';
