-- An instance whose snapshot cannot be decoded
-- (docs/decisions/0082-an-unreadable-instance-is-failed-in-its-row.md): its failure cannot be
-- written into the snapshot, so the engine writes it here, as the JSON text of a failure
-- (`SUTRA.STORE.CORRUPT`), and sets `status` to 'failed', which then no longer mirrors the
-- snapshot's. A claim refuses a row that has it; a listing reads it before the snapshot's own
-- failure; a restore clears it once the snapshot decodes again. NULL on every other row: no
-- index, nothing to backfill.
ALTER TABLE instances ADD COLUMN unreadable text;
