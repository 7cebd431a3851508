-- pgqueue 0009: what the Python enqueue refuses, SQL refuses too.
--
-- JSON nested deeper than 256 levels costs a decoder a stack frame a level (Python's json
-- module gives up near 1,000), so one such run could fail a worker's whole claim; a key
-- over 2,704 bytes does not fit a btree entry, and fails with a raw server error wherever
-- an index first takes it in. Keys are limited to 512 bytes, names to 200 characters.

-- Group keys longer than the limit, stored before it: a run whose group key was too long
-- for runs_group_claim_idx could sit in a queue without limits, and then made any change
-- that gave its queue limits fail (`pgqueue queues set Q --group-concurrency 1`, and the
-- start of every worker declaring them), and its own return to `queued` in a limited
-- queue. Such a key becomes its first 100 characters and its md5: runs that shared it
-- still share one, within 512 bytes. The constraint keeps new ones out, from any client.
UPDATE pgqueue.runs
   SET group_key = left(group_key, 100) || '~' || md5(group_key)
 WHERE octet_length(group_key) > 512;
UPDATE pgqueue.queues
   SET rr_cursor = CASE WHEN octet_length(rr_cursor) > 512
                        THEN left(rr_cursor, 100) || '~' || md5(rr_cursor) ELSE rr_cursor END,
       hint_group = CASE WHEN octet_length(hint_group) > 512
                         THEN left(hint_group, 100) || '~' || md5(hint_group) ELSE hint_group END
 WHERE octet_length(rr_cursor) > 512 OR octet_length(hint_group) > 512;
ALTER TABLE pgqueue.runs
    ADD CONSTRAINT runs_group_key_length CHECK (octet_length(group_key) <= 512);

-- Then the revision loads the functions that check: json_too_deep(), check_length() and
-- check_depth(), and enqueue() and emit_event(), which call them (sql/functions/).
