DELETE FROM pgqueue.workers WHERE id = %(id)s
