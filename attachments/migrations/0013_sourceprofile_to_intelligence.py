"""SourceProfile now lives in `intelligence` (its migration 0002 took it into its state): drop
it from attachments' state only. The table `attachments_sourceprofile` stays as it is."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("attachments", "0012_resegment_chinese"),
        ("intelligence", "0002_sourceprofile"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="SourceProfile")],
            database_operations=[],
        ),
    ]
