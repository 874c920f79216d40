from __future__ import annotations

import re

import pytest

from notebook.markdown import render_markdown
from tests.factories import NotebookFactory, NoteFactory

HOSTILE = """# Title

<script>alert('x')</script>
<img src=x onerror="alert(1)">
<a href="javascript:alert(1)">raw link</a>
[md link](javascript:alert(2))
[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)
<iframe src="https://evil.example"></iframe>
<div style="background:url(javascript:alert(3))" onclick="alert(4)">div</div>
![tracker](https://attacker.example/pixel.png)
[fine](https://example.org/page)
"""


def test_hostile_markdown_renders_inert():
    html = str(render_markdown(HOSTILE))
    lowered = html.lower()
    for tag in ("<script", "<iframe", "<img", "<div"):
        assert tag not in lowered
    # No element carries an event handler or a style attribute.
    assert not re.search(r"<[a-z][^>]*\s(on\w+|style)\s*=", lowered)
    assert not re.search(r'<a[^>]*href="\s*(javascript|data|vbscript):', lowered)
    assert "<h1>Title</h1>" in html
    assert "&lt;script&gt;" in html  # raw HTML is shown as text, not executed


def test_links_get_noopener_noreferrer():
    html = str(render_markdown("[fine](https://example.org/page)"))
    assert 'href="https://example.org/page"' in html
    assert 'rel="noopener noreferrer nofollow"' in html


def test_remote_images_become_links_not_requests():
    html = str(render_markdown("![tracker](https://attacker.example/pixel.png)"))
    assert "<img" not in html
    assert '<a href="https://attacker.example/pixel.png"' in html


def test_markdown_features_survive_sanitizing():
    html = str(
        render_markdown("**b** _i_ ~~s~~\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n```py\nx = 1\n```")
    )
    for tag in ("<strong>", "<em>", "<s>", "<table>", "<pre><code"):
        assert tag in html


@pytest.mark.django_db
def test_note_page_shows_hostile_body_inert(alice_client, alice):
    note = NoteFactory.create(notebook=NotebookFactory.create(owner=alice), body=HOSTILE)
    response = alice_client.get(f"/notes/{note.pk}/")
    assert response.status_code == 200
    body = response.content.decode().lower()
    assert "<script>alert" not in body
    assert "<img src=x" not in body
    assert not re.search(r'<a[^>]*href="\s*javascript:', body)
    assert "&lt;script&gt;" in body  # shown as text, not dropped silently
