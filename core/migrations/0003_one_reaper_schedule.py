from django.db import migrations

# The per-app reaper schedules before core.jobs.job_reap reaped every fenced kind
# (core.fencing). Removed here; the reverse puts them back as their migrations made them.
OLD_REAPERS = {
    "attachments: reap stuck ingestion": "attachments.tasks.reap_stuck_attachments",
    "guides: reap stuck guides": "guides.tasks.reap_stuck_guides",
    "intelligence: reap stuck profiles": "intelligence.tasks.reap_stuck_profiles",
}


def delete_old_reapers(apps, schema_editor):  # type: ignore[no-untyped-def]
    apps.get_model("django_q", "Schedule").objects.filter(name__in=OLD_REAPERS).delete()


def create_old_reapers(apps, schema_editor):  # type: ignore[no-untyped-def]
    Schedule = apps.get_model("django_q", "Schedule")
    for name, func in OLD_REAPERS.items():
        Schedule.objects.update_or_create(
            name=name,
            defaults={
                "func": func,
                "schedule_type": "I",  # every `minutes`
                "minutes": 1,
                "repeats": -1,
            },
        )


class Migration(migrations.Migration):
    """One reaper schedule: core's (0002) reaps jobs and every registered fenced kind."""

    dependencies = [
        ("core", "0002_reaper_schedule"),
        ("attachments", "0002_reaper_schedule"),
        ("guides", "0001_initial"),
        ("intelligence", "0001_reaper_schedule"),
    ]

    operations = [migrations.RunPython(delete_old_reapers, create_old_reapers)]
