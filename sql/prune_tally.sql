-- Drop tally buckets older than a day (the views read the last hour).
DELETE FROM pgqueue.finished_tally WHERE bucket < now() - interval '1 day'
