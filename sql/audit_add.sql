-- Record one operator action (pgqueue.audit): who, what, on which run or filter, how
-- many runs it changed, and the reason given.
INSERT INTO pgqueue.audit (actor, action, run_id, target, count, reason)
VALUES (%(actor)s, %(action)s, %(run_id)s, %(target)s, %(count)s, %(reason)s)
