-- A step's update of its instance row can be a heap-only tuple (HOT) update: no index entry is
-- written when no indexed column changes and the row's page has room. `updated_at` changes at
-- every step, and the purger's index was on it, so every step wrote an entry into each of the
-- table's indexes. The purger now finds terminal instances by `ended_at`, stamped once by the
-- step that ends the instance (an ended instance never changes again), and pages keep room for
-- the next version of their rows.
ALTER TABLE instances ADD COLUMN ended_at bigint;
UPDATE instances SET ended_at = updated_at WHERE status IN ('completed', 'cancelled');
DROP INDEX instances_purgeable;
CREATE INDEX instances_purgeable ON instances (ended_at) WHERE ended_at IS NOT NULL;
ALTER TABLE instances SET (fillfactor = 85);
