"""A read-only Django model over pgqueue.runs, for the admin and for ORM queries.

pgqueue owns the table (its own migrations, `manage.py pgqueue migrate`): Django never
creates or alters it (managed = False). Change runs through the App (cancel, retry)."""

from __future__ import annotations

from django.db import models

from pgqueue.states import STATES

# Plain strings: the choices the migration of this model records.
STATE_CHOICES = [(s.value, s.value) for s in STATES]


class Run(models.Model):
    id = models.BigAutoField(primary_key=True)
    task = models.TextField()
    queue = models.TextField()
    state = models.TextField(choices=STATE_CHOICES)
    priority = models.SmallIntegerField()
    args = models.JSONField()
    kwargs = models.JSONField()
    result = models.JSONField(null=True)
    error = models.TextField(null=True)
    attempt = models.IntegerField()
    max_attempts = models.IntegerField()
    timeout_seconds = models.FloatField(null=True)
    group_key = models.TextField(null=True)
    idempotency_key = models.TextField(null=True)
    parent_id = models.BigIntegerField(null=True)
    run_at = models.DateTimeField()
    created_at = models.DateTimeField()
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    worker_id = models.UUIDField(null=True)
    lease_expires_at = models.DateTimeField(null=True)
    progress = models.JSONField(null=True)
    cancel_reason = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = 'pgqueue"."runs'  # schema-qualified: Django quotes it as "pgqueue"."runs"
        ordering = ["-id"]
        verbose_name = "run"
        verbose_name_plural = "runs"

    def __str__(self) -> str:
        return f"run {self.id} ({self.task}, {self.state})"
