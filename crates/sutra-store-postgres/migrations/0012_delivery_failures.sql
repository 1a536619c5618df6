-- The delivery ceiling (docs/decisions/0047-nothing-retried-forever.md): how many times a step
-- that took a delivery failed (a panic, a corrupt row: anything but a held claim), and the last
-- error. `attempts` counts every deferral, a refusal by a held claim among them; `failures`
-- counts only failed steps, and past `sutra.deliveries.max-attempts` the dispatcher fails the
-- instance in place instead of trying once more.
ALTER TABLE deliveries ADD COLUMN failures bigint NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN last_error text;
