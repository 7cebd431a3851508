-- Aging turned off for queue %(queue)s: its waiting runs get back the priority they were
-- enqueued with (base_priority, kept by age_priorities.sql once it changed one). The
-- statement adds its own condition after these lines (AND ...).
UPDATE pgqueue.runs r SET priority = r.base_priority, base_priority = NULL
 WHERE r.queue = %(queue)s AND r.state IN ('scheduled', 'queued')
   AND r.base_priority IS NOT NULL
