"""Integrations with web frameworks: pgqueue.contrib.django, pgqueue.contrib.flask."""
