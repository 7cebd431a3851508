-- The state of a run being inserted, from its due time `due` (a column of the including
-- statement): `scheduled` while it lies in the future, else `queued`
-- (docs/state_machine.md). Every statement that inserts runs includes this; in the
-- database, pgqueue.enqueue() (sql/functions/enqueue.sql) applies the same rule.
CASE WHEN due > now() THEN 'scheduled' ELSE 'queued' END
