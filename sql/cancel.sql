SELECT pgqueue.cancel(%(id)s, %(children)s, %(reason)s) AS canceled
