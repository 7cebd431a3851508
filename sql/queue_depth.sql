-- Live runs of each given queue by state, and the oldest queued run's age: each count
-- reads only the partial index of its state.
SELECT q.queue,
       (SELECT count(*) FROM pgqueue.runs r WHERE r.state = 'queued' AND r.queue = q.queue),
       (SELECT count(*) FROM pgqueue.runs r WHERE r.state = 'scheduled' AND r.queue = q.queue),
       (SELECT count(*) FROM pgqueue.runs r WHERE r.state = 'running' AND r.queue = q.queue),
       (SELECT count(*) FROM pgqueue.runs r WHERE r.state = 'waiting' AND r.queue = q.queue),
       extract(epoch FROM now() - (SELECT min(r.run_at) FROM pgqueue.runs r
                                    WHERE r.state = 'queued' AND r.queue = q.queue))
           ::double precision
FROM unnest(%(queues)s::text[]) AS q (queue)
