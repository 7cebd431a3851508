SELECT state, result, error, task FROM pgqueue.runs WHERE id = %(id)s
