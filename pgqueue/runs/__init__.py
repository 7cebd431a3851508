"""Runs after their enqueue: handles, waiters, progress, and how a run's fields are shown."""
