-- Whether the runs of one queue are flagged `limited` (queue_flags_runs' rule), so that
-- its groups' queued runs are in runs_group_claim_idx: the dashboard then lists one
-- group's queued runs from that index (dashboard_runs_queued_group.sql).
SELECT {{queue_flags_runs}} AS flagged
FROM pgqueue.queues q
WHERE q.name = %(queue)s::text
