"""The enqueue side: the Enqueuer (enqueuer.py), options and their encoding into rows, inserts,
uniqueness, validation, batches, events and the group commit of async enqueues.
"""
