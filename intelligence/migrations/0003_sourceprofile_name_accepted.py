"""The owner's explicit choice of the suggested file name: until it is made, a source is shown
and downloaded under the name it was uploaded with."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("intelligence", "0002_sourceprofile")]

    operations = [
        migrations.AddField(
            model_name="sourceprofile",
            name="name_accepted",
            field=models.BooleanField(default=False),
        ),
    ]
