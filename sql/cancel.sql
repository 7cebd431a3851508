SELECT pgqueue.cancel(%(id)s) AS canceled
