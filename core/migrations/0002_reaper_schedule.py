from django.db import migrations

REAPER = "core: reap lost jobs, send missing tickets"


def create_schedule(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("django_q", "Schedule").objects.update_or_create(
        name=REAPER,
        defaults={
            "func": "core.jobs.job_reap",
            "schedule_type": "I",  # every `minutes`
            "minutes": 1,
            "repeats": -1,
        },
    )


def delete_schedule(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("django_q", "Schedule").objects.filter(name=REAPER).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("core", "0001_job"),
        ("django_q", "0019_alter_task_options_alter_ormq_key_alter_ormq_lock_and_more"),
    ]

    operations = [migrations.RunPython(create_schedule, delete_schedule)]
