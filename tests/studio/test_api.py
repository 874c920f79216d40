"""Studio's REST API: create from chosen sources, poll, read the content, rename, regenerate,
cancel, export and delete; bad input answers 4xx and makes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client

from accounts.services import api_token_create
from studio import services
from studio.models import StudioOutput

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(library) -> Client:
    _, raw = api_token_create(user=library.alice, name="script")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def post(api: Client, url: str, body: dict[str, Any]) -> Any:
    return api.post(url, json.dumps(body), content_type="application/json")


def test_create_poll_read_rename_regenerate_cancel_export_delete(api, library):
    url = f"/api/notebooks/{library.book.pk}/studio"
    made = post(api, url, {"kind": "timeline", "attachment_ids": [library.history.pk]})
    assert made.status_code == 201, made.content
    body = made.json()
    assert body["status"] == "pending"
    assert body["scope"] == [f"attachment:{library.history.pk}"]
    assert body["created_by"] == "alice"
    assert api.get(f"/api/studio/{body['id']}/export").status_code == 409  # not ready yet
    services.output_write(output_id=body["id"], token=1)  # what the worker does
    ready = api.get(f"/api/studio/{body['id']}").json()
    assert ready["status"] == "ready"
    assert ready["progress"] == 100
    assert ready["content"]["citations"][0]["file"] == "history.pdf"
    assert [o["id"] for o in api.get(url).json()] == [body["id"]]
    renamed = api.patch(f"/api/studio/{body['id']}", json.dumps({"title": "Valley"}),
                        content_type="application/json")  # fmt: skip
    assert renamed.json()["title"] == "Valley"
    export = api.get(f"/api/studio/{body['id']}/export")
    assert export["Content-Type"].startswith("text/markdown")
    assert "# Valley" in export.content.decode()
    assert api.post(f"/api/studio/{body['id']}/regenerate").json()["status"] == "pending"
    assert api.post(f"/api/studio/{body['id']}/cancel").json()["status"] == "cancelled"
    assert api.delete(f"/api/studio/{body['id']}").status_code == 204
    assert api.get(f"/api/studio/{body['id']}").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "podcast"},
        {},
        {"kind": "faq", "attachment_ids": [0]},
        {"kind": "faq", "attachment_ids": "all"},
        {"kind": "faq", "title": "x" * 201},
    ],
)
def test_bad_requests_answer_422_and_make_nothing(api, library, body):
    response = post(api, f"/api/notebooks/{library.book.pk}/studio", body)
    assert response.status_code == 422, response.content
    assert not StudioOutput.objects.exists()


def test_a_missing_source_answers_404(api, library):
    response = post(api, f"/api/notebooks/{library.book.pk}/studio",
                    {"kind": "faq", "attachment_ids": [987654]})  # fmt: skip
    assert response.status_code == 404
    assert not StudioOutput.objects.exists()
