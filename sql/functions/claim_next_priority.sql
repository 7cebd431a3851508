-- The most urgent priority above p_after (-32769: any) with a queued, flagged run of the
-- queue, stepping over the hinted group's claimed runs. p_hid = 0 when no hint applies.
-- (A function: claim_limited() asks at the start and after each priority it finishes.)
CREATE OR REPLACE FUNCTION pgqueue.claim_next_priority(
    p_queue text, p_after integer, p_hp smallint, p_hg text, p_hid bigint
) RETURNS smallint LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pgqueue, pg_temp
AS $$
DECLARE
    lvl smallint;
BEGIN
    IF p_hid = 0 OR p_hp <= p_after THEN
        RETURN (SELECT r.priority FROM pgqueue.runs r
                 WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
                   AND r.priority > p_after
                 ORDER BY r.priority LIMIT 1);
    END IF;
    lvl := (SELECT r.priority FROM pgqueue.runs r
             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
               AND r.priority > p_after AND r.priority < p_hp
             ORDER BY r.priority LIMIT 1);
    IF lvl IS NOT NULL THEN
        RETURN lvl;
    END IF;
    -- the hint's priority: the groups before the hinted one, then from the hint on. Each
    -- probe reads runs_group_claim_idx in its order and stops at the first live entry
    -- (an EXISTS here lets a generic plan scan the table instead).
    IF (SELECT r.id FROM pgqueue.runs r
         WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
           AND r.priority = p_hp AND r.group_key < p_hg
         ORDER BY r.group_key, r.id LIMIT 1) IS NOT NULL
       OR (SELECT r.id FROM pgqueue.runs r
            WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
              AND r.priority = p_hp AND (r.group_key, r.id) > (p_hg, p_hid)
            ORDER BY r.group_key, r.id LIMIT 1) IS NOT NULL THEN
        RETURN p_hp;
    END IF;
    RETURN (SELECT r.priority FROM pgqueue.runs r
             WHERE r.state = 'queued' AND r.limited AND r.queue = p_queue
               AND r.priority > p_hp
             ORDER BY r.priority LIMIT 1);
END
$$;
