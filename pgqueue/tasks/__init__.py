"""Tasks: the Task type, the Registry of tasks, queues and schedules, retry policies and rate
limits."""
