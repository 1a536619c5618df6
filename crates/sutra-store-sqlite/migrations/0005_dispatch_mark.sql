-- The dispatcher's mark (docs/decisions/0024-one-transaction-steps-and-group-commit.md): how many
-- times a delivery was handed out since it was asked or last deferred, none of which took it.
-- Handing a row out counts one and makes it due again one claim timeout later; a deferral clears
-- the count; past `max-recoveries` the dispatcher fails the instance as poisoned.
ALTER TABLE deliveries ADD COLUMN dispatches INTEGER NOT NULL DEFAULT 0;
