"""The enqueue side: options and their encoding into rows, inserts, uniqueness, validation, batches
and enqueues by name.
"""
