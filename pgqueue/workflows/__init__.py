"""Workflows: the run's Context, durable steps, fan-out, and the steps running now."""
