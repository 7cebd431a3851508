"""Tasks: the Task type, the registry of tasks and queues, retry policies and rate limits."""
