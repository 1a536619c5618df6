-- Answers across replicas (decision 0024): which replica holds a caller until the instance ends
-- (`ack: complete`), written by the step that registered the hold, read by the claim of the step
-- that ends the instance. When that step runs on another replica, its commit sends a NOTIFY on
-- `sutra_ended` naming the instance, and the holder answers its caller. `*` when callers are
-- held on more than one replica; NULL when none ever was. Not indexed, so that writing it keeps
-- the settle a HOT update.
ALTER TABLE instances ADD COLUMN held_by text;
