# The Run model is unmanaged: this migration creates nothing; pgqueue's own migrations
# (`manage.py pgqueue migrate`) own the table.
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies: list[tuple[str, str]] = []

    operations = [
        migrations.CreateModel(
            name="Run",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("task", models.TextField()),
                ("queue", models.TextField()),
                (
                    "state",
                    models.TextField(
                        choices=[
                            ("scheduled", "scheduled"),
                            ("queued", "queued"),
                            ("running", "running"),
                            ("waiting", "waiting"),
                            ("succeeded", "succeeded"),
                            ("failed", "failed"),
                            ("canceled", "canceled"),
                        ]
                    ),
                ),
                ("priority", models.SmallIntegerField()),
                ("args", models.JSONField()),
                ("kwargs", models.JSONField()),
                ("result", models.JSONField(null=True)),
                ("error", models.TextField(null=True)),
                ("attempt", models.IntegerField()),
                ("max_attempts", models.IntegerField()),
                ("timeout_seconds", models.FloatField(null=True)),
                ("group_key", models.TextField(null=True)),
                ("idempotency_key", models.TextField(null=True)),
                ("parent_id", models.BigIntegerField(null=True)),
                ("run_at", models.DateTimeField()),
                ("created_at", models.DateTimeField()),
                ("started_at", models.DateTimeField(null=True)),
                ("finished_at", models.DateTimeField(null=True)),
                ("worker_id", models.UUIDField(null=True)),
                ("lease_expires_at", models.DateTimeField(null=True)),
            ],
            options={
                "verbose_name": "run",
                "verbose_name_plural": "runs",
                "db_table": 'pgqueue"."runs',
                "ordering": ["-id"],
                "managed": False,
            },
        ),
    ]
