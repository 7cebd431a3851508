# The Run model is unmanaged: this migration changes nothing in the database; pgqueue's
# own migration 0014 adds the columns.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("pgqueue", "0001_initial")]

    operations = [
        migrations.AddField(model_name="run", name="progress", field=models.JSONField(null=True)),
        migrations.AddField(
            model_name="run", name="cancel_reason", field=models.TextField(null=True)
        ),
    ]
