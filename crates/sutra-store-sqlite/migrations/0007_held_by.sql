-- Which process holds a caller until the instance ends (`ack: complete`), the twin of
-- PostgreSQL's migration 0008 (decision 0024). One process serves a file, so nothing reads it
-- to notify anyone; it is kept so that both stores record and claim the same row.
ALTER TABLE instances ADD COLUMN held_by TEXT;
