-- Delete up to `limit` audit entries recorded before the cutoff, oldest first. Ids grow
-- with `at` (both given at insert, `at` the transaction's start), so the primary key
-- reads them oldest first and the scan stops at the batch's last old entry; a round with
-- nothing to delete reads the table (kept small by this very pruning: an operator's
-- actions, one row each, bulk actions included). No FOR UPDATE: the worker's role may
-- delete audit entries but not alter them (no UPDATE); of two pruners on the same batch,
-- the second waits for the first and deletes nothing, and its short batch ends its round.
DELETE FROM pgqueue.audit
WHERE id = ANY (ARRAY(
    SELECT id
    FROM pgqueue.audit
    WHERE at < now() - %(older_than)s * interval '1 second'
    ORDER BY id
    LIMIT %(limit)s
))
