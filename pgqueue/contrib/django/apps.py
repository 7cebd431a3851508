"""The Django app: add "pgqueue.contrib.django" to INSTALLED_APPS."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from pgqueue.contrib.django import checks, conf

        checks.register()
        conf.setup()
