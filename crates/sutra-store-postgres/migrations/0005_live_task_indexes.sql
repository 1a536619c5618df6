-- The task poll's indexes (issue 11): a poll looks only at live tasks — available ones by when
-- they became available, locked ones by when their lock expires — but the one index over
-- (tenant, topic, state, available_at) cannot serve both arms of that condition at once, so the
-- poll read every task of its topics, finished ones included: a cost that grew with the table's
-- history. Two partial indexes hold only the live rows; the poll's statements name the states as
-- literals so that every plan, generic ones included, may use them.
CREATE INDEX tasks_available ON tasks (tenant, topic, available_at) WHERE state = 'available';
CREATE INDEX tasks_locked ON tasks (tenant, topic, locked_until) WHERE state = 'locked';
