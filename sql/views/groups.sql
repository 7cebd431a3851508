-- Per queue and group of unfinished runs: how many run under a live lease, how many are
-- queued or deferred, and when the group's newest running run started.
CREATE OR REPLACE VIEW pgqueue.groups AS
SELECT r.queue,
       r.group_key,
       count(*) FILTER (WHERE r.state = 'running' AND r.lease_expires_at > now()) AS running,
       count(*) FILTER (WHERE r.state = 'queued') AS queued,
       count(*) FILTER (WHERE r.state IN ('scheduled', 'waiting')) AS deferred,
       max(r.started_at) FILTER (WHERE r.state = 'running') AS last_started_at
FROM pgqueue.runs r
WHERE r.state IN ('scheduled', 'queued', 'running', 'waiting')
GROUP BY r.queue, r.group_key;
