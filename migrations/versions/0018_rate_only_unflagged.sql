-- pgqueue 0018: the runs of a queue whose only limit is a queue-level rate limit are no
-- longer flagged `limited` (sql/parts/queue_flags_runs.sql).
--
-- Such a queue is claimed by claim_rated.sql, from runs_claim_idx, which never reads the
-- flag; flagged, every claim of its runs also entered them in runs_group_order_idx. The
-- flag now means "claimed by claim_limited()": a concurrency, a group concurrency, a group
-- rate limit or ordered groups. pgqueue.enqueue(), pgqueue.enqueue_unique() and the
-- trigger function pgqueue.queue_limits_changed() follow (upgrade() loads them); here the
-- unfinished runs of every queue that claim_limited() does not claim lose the flag.
UPDATE pgqueue.runs r
   SET limited = false
  FROM pgqueue.queues q
 WHERE q.name = r.queue
   AND r.limited
   AND r.state IN ('scheduled', 'queued', 'running', 'waiting')
   AND q.concurrency IS NULL AND q.group_concurrency IS NULL
   AND q.group_rate_limit IS NULL AND NOT q.ordered;
