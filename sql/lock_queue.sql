-- Serialise claims of one limited queue: taken in the claim's transaction, before
-- claim_limited, whose fresh snapshot then counts every committed claim.
SELECT name FROM pgqueue.queues WHERE name = %(queue)s FOR UPDATE
