"""The Django app: add "pgqueue.contrib.django" to INSTALLED_APPS."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from pgqueue.contrib.django import checks, conf, schema

        checks.register()
        conf.setup()
        connection_created.connect(conf.close_apps, dispatch_uid="pgqueue.close_apps")
        post_migrate.connect(schema.migrate_with_django, sender=self)
