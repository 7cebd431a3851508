-- A queue comes to be claimed by claim_limited(), or no longer is (a concurrency, a group
-- concurrency, a group rate limit or ordered groups come or go; a queue-level rate limit
-- alone does not count: sql/parts/queue_flags_runs.sql): re-flag its unfinished runs. The lock waits out the
-- writers of runs in flight (an enqueue among them read the queue's old limits) and holds
-- new ones back until this transaction commits; a statement held back takes its snapshot
-- after the lock, so it reads the new limits. SHARE ROW EXCLUSIVE, not SHARE: two changes
-- at once must take turns (each holding SHARE, their UPDATEs would deadlock). If a long
-- transaction keeps the lock from us, re-flag without it: claim_limited() takes in what
-- a late enqueue files wrongly.
CREATE OR REPLACE FUNCTION pgqueue.queue_limits_changed() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    now_limited boolean := NEW.concurrency IS NOT NULL OR NEW.group_concurrency IS NOT NULL
                           OR NEW.group_rate_limit IS NOT NULL OR NEW.ordered;
    was_limited boolean := false;
    old_timeout text := current_setting('lock_timeout');
BEGIN
    IF TG_OP = 'UPDATE' THEN
        was_limited := OLD.concurrency IS NOT NULL OR OLD.group_concurrency IS NOT NULL
                       OR OLD.group_rate_limit IS NOT NULL OR OLD.ordered;
    END IF;
    IF was_limited = now_limited THEN
        RETURN NULL;
    END IF;
    BEGIN
        PERFORM set_config('lock_timeout', '500ms', true);
        LOCK TABLE pgqueue.runs IN SHARE ROW EXCLUSIVE MODE;
    EXCEPTION WHEN lock_not_available THEN
        RAISE NOTICE 'pgqueue: queue %: runs is busy; its runs are re-flagged without the lock',
            NEW.name;
    END;
    PERFORM set_config('lock_timeout', old_timeout, true);
    UPDATE pgqueue.runs r
       SET limited = now_limited
     WHERE r.queue = NEW.name
       AND r.state IN ('scheduled', 'queued', 'running', 'waiting')
       AND r.limited <> now_limited;
    RETURN NULL;
END
$$;
