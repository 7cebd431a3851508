-- `pgqueue demo`: how many of its runs have finished.
SELECT count(*) FROM pgqueue.runs
WHERE id = ANY(%(ids)s) AND state IN ('succeeded', 'failed', 'canceled')
