-- `pgqueue demo`: final states of its runs, and how many failed attempts were recorded.
SELECT (SELECT jsonb_object_agg(state, n)
          FROM (SELECT state, count(*) AS n FROM pgqueue.runs
                 WHERE id = ANY(%(ids)s) GROUP BY state) s) AS states,
       (SELECT count(*) FROM pgqueue.run_errors WHERE run_id = ANY(%(ids)s)) AS failed_attempts
