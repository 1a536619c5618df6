-- The pull surface (SPEC §5.5). A task remembers who took its last lock, so that a listing shows
-- it and an expired lock names the worker that went silent. `attempt` is the attempt a locked
-- task is on, or the one an available task's next lock will be.
ALTER TABLE tasks ADD COLUMN worker TEXT;

-- A poll looks within one tenant and topic, oldest available first; a listing pages by id.
DROP INDEX tasks_by_topic;
CREATE INDEX tasks_by_topic ON tasks (tenant, topic, state, available_at);
CREATE INDEX tasks_by_tenant ON tasks (tenant, id);
