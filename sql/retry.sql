SELECT pgqueue.retry(%(id)s) AS retried
