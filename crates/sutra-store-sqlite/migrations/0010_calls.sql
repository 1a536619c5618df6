-- Calls (docs/design/composition.md §5.3, §6.1): a called flow runs as an instance of its own, a
-- child, inserted `created` by its parent's step. The child names whom it answers: its parent
-- instance and the parent's park that waits for it. No foreign key: a parent purged after its
-- retention must neither cascade to a child still running nor fail the child's final commit, which
-- asks its report of the parent only if the parent is still there (and not ended).
ALTER TABLE instances ADD COLUMN parent TEXT;
ALTER TABLE instances ADD COLUMN parent_park INTEGER;
-- Listing a parent's children (keyset by id) and cancelling the live children of a disarmed park;
-- only children carry an entry.
CREATE INDEX instances_by_parent ON instances (tenant, parent, id) WHERE parent IS NOT NULL;
