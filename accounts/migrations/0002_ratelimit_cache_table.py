"""The table of the "ratelimit" cache (core.ratelimit.AtomicDatabaseCache), created here so
that `migrate` is all a deployment runs. Created even when REDIS_URL holds the counts, so that
unsetting it later needs no extra step."""

from django.core.management.commands.createcachetable import Command as CreateCacheTable
from django.db import migrations

TABLE = "notebook_ratelimit"


def create_table(apps, schema_editor):
    command = CreateCacheTable()
    command.verbosity = 0
    command.create_table(schema_editor.connection.alias, TABLE, dry_run=False)


def drop_table(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema_editor.quote_name(TABLE)}")


class Migration(migrations.Migration):
    dependencies = [("accounts", "0001_initial")]

    operations = [migrations.RunPython(create_table, drop_table)]
