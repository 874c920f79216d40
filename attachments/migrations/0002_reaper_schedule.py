from __future__ import annotations

from django.db import migrations


def create_schedule(apps, schema_editor):  # type: ignore[no-untyped-def]
    Schedule = apps.get_model("django_q", "Schedule")
    Schedule.objects.update_or_create(
        name="attachments: reap stuck ingestion",
        defaults={
            "func": "attachments.tasks.reap_stuck_attachments",
            "schedule_type": "I",  # every `minutes`
            "minutes": 1,
            "repeats": -1,
        },
    )


def delete_schedule(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("django_q", "Schedule").objects.filter(
        name="attachments: reap stuck ingestion"
    ).delete()


class Migration(migrations.Migration):
    """The periodic reaper: nothing may stay "processing" after its worker died."""

    dependencies = [
        ("attachments", "0001_initial"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(create_schedule, delete_schedule)]
