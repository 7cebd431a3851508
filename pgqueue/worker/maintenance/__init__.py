"""The worker's periodic duties, one module each; each is given only what it uses (the
pool, its queues, its intervals, callbacks), never the Worker.

lease_keeper  renews every held lease in one statement, from its own thread
loop_watch    warns when task code blocks the event loop, naming the task
rescuer       takes back runs whose lease expired elsewhere
stager        makes scheduled runs and expired waits ready
scheduler     enqueues the due ticks of cron schedules
tally         folds finished runs into per-queue 5-second buckets
pruner        deletes finished runs and events past their retention
worker_pruner deletes the rows of workers that stopped beating
queue_limits  which served queues have cluster-wide limits
queue_depth   the queue depth gauges of the metrics endpoint
"""
