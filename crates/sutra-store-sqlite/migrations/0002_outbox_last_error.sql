-- The outbox worker (SPEC §5.4) keeps why a row's last send failed, so that a row backing off or
-- poisoned says what is wrong with it.
ALTER TABLE outbox ADD COLUMN last_error TEXT;
