SELECT pgqueue.cancel(%(id)s, %(children)s) AS canceled
