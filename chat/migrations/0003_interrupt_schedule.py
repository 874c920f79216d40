from __future__ import annotations

from django.db import migrations

NAME = "chat: interrupt abandoned answers"


def create_schedule(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("django_q", "Schedule").objects.update_or_create(
        name=NAME,
        defaults={
            "func": "chat.tasks.interrupt_abandoned_answers",
            "schedule_type": "I",  # every `minutes`
            "minutes": 1,
            "repeats": -1,
        },
    )


def delete_schedule(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("django_q", "Schedule").objects.filter(name=NAME).delete()


class Migration(migrations.Migration):
    """The periodic sweep: an answer whose web process died does not stay "being written"."""

    dependencies = [
        ("chat", "0002_message_attempt"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]
    operations = [migrations.RunPython(create_schedule, delete_schedule)]
