"""SourceProfile moves here from `attachments`, in state only: the table keeps its name
(`attachments_sourceprofile`, set as the model's db_table), its rows and its indexes.
attachments 0013 then drops the model from attachments' state. The content type (and so the
permissions granted on it and the admin log) is renamed with it."""

import django.db.models.deletion
import pgvector.django.indexes
import pgvector.django.vector
from django.conf import settings
from django.db import migrations, models


def rename_content_type(apps, old, new):  # type: ignore[no-untyped-def]
    ContentType = apps.get_model("contenttypes", "ContentType")
    if not ContentType.objects.filter(app_label=new, model="sourceprofile").exists():
        ContentType.objects.filter(app_label=old, model="sourceprofile").update(app_label=new)


def forwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    rename_content_type(apps, "attachments", "intelligence")


def backwards(apps, schema_editor):  # type: ignore[no-untyped-def]
    rename_content_type(apps, "intelligence", "attachments")


class Migration(migrations.Migration):
    # The vector size follows EMBEDDING_DIMENSIONS, as in attachments 0008.

    dependencies = [
        ("intelligence", "0001_reaper_schedule"),
        ("attachments", "0012_resegment_chinese"),
        ("contenttypes", "0002_remove_content_type_name"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="SourceProfile",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "doc_type",
                            models.CharField(
                                choices=[
                                    ("invoice", "Invoice"),
                                    ("receipt", "Receipt"),
                                    ("flight_ticket", "Flight ticket"),
                                    ("order_confirmation", "Order confirmation"),
                                    ("other", "Other"),
                                ],
                                default="other",
                                max_length=24,
                            ),
                        ),
                        ("confidence", models.FloatField(default=0)),
                        ("better_name", models.CharField(blank=True, max_length=200)),
                        ("doc_date", models.DateField(blank=True, null=True)),
                        ("extracted", models.JSONField(blank=True, default=dict)),
                        ("edited", models.BooleanField(default=False)),
                        ("method", models.CharField(blank=True, max_length=16)),
                        ("model", models.CharField(blank=True, max_length=200)),
                        ("canonical_text", models.TextField(blank=True)),
                        (
                            "embedding",
                            pgvector.django.vector.VectorField(
                                blank=True, dimensions=settings.EMBEDDING_DIMENSIONS, null=True
                            ),
                        ),
                        ("embedding_model", models.CharField(blank=True, max_length=200)),
                        ("timings", models.JSONField(blank=True, default=dict)),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("pending", "Queued"),
                                    ("processing", "Being analysed"),
                                    ("ready", "Ready"),
                                    ("failed", "Failed"),
                                ],
                                default="pending",
                                max_length=12,
                            ),
                        ),
                        ("token", models.PositiveIntegerField(default=0)),
                        ("attempts", models.PositiveSmallIntegerField(default=0)),
                        ("error", models.TextField(blank=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("ready_at", models.DateTimeField(blank=True, null=True)),
                        ("created_at", models.DateTimeField(auto_now_add=True)),
                        ("updated_at", models.DateTimeField(auto_now=True)),
                        (
                            "attachment",
                            models.OneToOneField(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="profile",
                                to="attachments.noteattachment",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "attachments_sourceprofile",
                        "indexes": [
                            models.Index(fields=["doc_type"], name="profile_doc_type"),
                            models.Index(
                                fields=["status", "heartbeat_at"], name="profile_status_heartbeat"
                            ),
                            pgvector.django.indexes.HnswIndex(
                                ef_construction=64,
                                fields=["embedding"],
                                m=16,
                                name="sourceprofile_embedding_hnsw",
                                opclasses=["vector_cosine_ops"],
                            ),
                        ],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(forwards, backwards),
    ]
