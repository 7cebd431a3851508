INSERT INTO pgqueue.workers (id, host, pid, queues, tasks, concurrency, version)
VALUES (%(id)s, %(host)s, %(pid)s, %(queues)s, %(tasks)s, %(concurrency)s, %(version)s)
