-- The database's clock, inlined (issue 11). 0001's sutra_now() read clock_timestamp(), which is
-- VOLATILE: PostgreSQL does not inline a STABLE SQL function whose body is VOLATILE, so every
-- call ran as a function call of its own, a tenth of the database's CPU in a task benchmark.
-- statement_timestamp() is the same clock read when the statement arrived: STABLE, so the
-- function's body is inlined into each statement and folded into its index conditions, and it
-- keeps 0001's meaning — an instant during the statement, one clock for every replica, moving
-- from one statement of a transaction to the next (unlike now(), frozen at the transaction's
-- start). A statement that waits on a lock reads the instant it arrived, never a later one: a
-- deadline it writes is at most as late as it would have been.
CREATE OR REPLACE FUNCTION sutra_now() RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE
AS $$ SELECT (extract(epoch FROM statement_timestamp()) * 1000000)::bigint $$;
