"""attachments.formats.web: a page's main text, by section, from purpose-built HTML."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from attachments.formats import FormatError, Unit
from attachments.formats.web import UNIT_CHARS, read_html

BLOG = """<!DOCTYPE html>
<html lang="en"><head><title>Installing Notebook | The Notebook Blog</title>
<meta property="article:published_time" content="2026-03-14T09:00:00Z">
<style>body { color: red } .style-rule-text {}</style>
<script>document.write("SCRIPT WROTE THIS");</script>
</head><body>
<nav><ul><li><a href="/">Front page</a></li><li><a href="/about">About us</a></li>
<li><a href="/blog">Blog archive</a></li></ul></nav>
<div class="cookie-banner" id="cookie-consent">We use cookies to improve your experience.
<button>Accept all cookies</button></div>
<aside class="sidebar"><h3>Popular posts</h3><ul><li><a href="/p1">Ten tips for sidebars</a>
</li><li><a href="/p2">Why sidebars matter</a></li></ul></aside>
<main><article>
<h1>Installing Notebook</h1>
<p>Notebook is a self-hosted research assistant. This guide walks through installing it on a
fresh server, step by step, with every command you need to type.</p>
<h2>Install</h2>
<p>You need Python 3.11 and PostgreSQL 16 with the pgvector extension before you begin.</p>
<h3>On Debian</h3>
<p>Install the packages with apt, then create a database user for Notebook and grant it the
rights it needs.</p>
<ul><li>python3.11 and python3.11-venv</li><li>postgresql-16 and postgresql-16-pgvector</li></ul>
<h3>On macOS</h3>
<p>Use Homebrew to install Python and PostgreSQL; the pgvector formula builds the extension.</p>
<h2>Requirements</h2>
<table><tr><th>Component</th><th>Minimum</th></tr><tr><td>Memory</td><td>4 GB</td></tr>
<tr><td>Disk</td><td>20 GB</td></tr></table>
<p>See <a href="https://docs.example/sizing">the sizing guide</a> for a larger deployment.</p>
<iframe src="https://ads.example/frame">IFRAME TEXT</iframe>
<form><label>FORM LABEL</label><input name="q"></form>
<script>console.log("INLINE SCRIPT IN BODY")</script>
<!-- HTML COMMENT TEXT -->
</article>
<section class="comments" id="comments"><h2>Comments</h2>
<div class="comment"><p>Great post! Visit my site for cheap watches.</p></div></section>
</main>
<footer><p>© 2026 The Notebook Blog. All rights reserved. Privacy policy. Terms.</p></footer>
</body></html>
"""

BOILERPLATE = [
    "Front page",
    "About us",
    "Blog archive",
    "cookies",
    "Popular posts",
    "Ten tips",
    "SCRIPT WROTE",
    "INLINE SCRIPT",
    "IFRAME TEXT",
    "FORM LABEL",
    "HTML COMMENT",
    "cheap watches",
    "Comments",
    "All rights reserved",
    "color: red",
    "style-rule-text",
    "https://",
    "<",
]


def page_text(units: list[Unit]) -> str:
    return "\n".join(f"{u.label}\n{u.text}" for u in units)


def test_a_blog_post_is_read_by_section_without_its_boilerplate() -> None:
    page = read_html(BLOG.encode(), url="https://blog.example/install")
    assert page.title == "Installing Notebook"
    assert page.date == "2026-03-14"
    assert [u.label for u in page.units] == [
        "Installing Notebook",
        "Install",
        "Install › On Debian",
        "Install › On macOS",
        "Requirements",
    ]
    assert [u.number for u in page.units] == [1, 2, 3, 4, 5]
    debian = page.units[2].text
    assert debian.splitlines()[0] == "On Debian"  # the heading on its own first line
    assert "- python3.11 and python3.11-venv\n- postgresql-16" in debian
    requirements = page.units[4].text
    assert "Component | Minimum\nMemory | 4 GB\nDisk | 20 GB" in requirements
    assert "See the sizing guide for a larger deployment." in requirements  # link text only
    text = page_text(page.units)
    for boilerplate in BOILERPLATE:
        assert boilerplate not in text


def test_a_page_without_headings_is_one_unit_labelled_with_its_title() -> None:
    html = (
        "<html><head><title>Notes on tea</title></head><body>"
        "<div id='nav'><a href='/'>Front page</a> <a href='/shop'>Shop</a></div><article><p>"
        + "Green tea is steamed or pan-fired soon after picking, which stops oxidation. "
        * 4
        + "</p><p>Black tea is fully oxidised before drying, which darkens the leaves.</p>"
        "</article></body></html>"
    )
    page = read_html(html)
    assert [u.label for u in page.units] == ["Notes on tea"]
    assert page.units[0].text.startswith("Green tea is steamed")
    assert page.units[0].text.endswith("which darkens the leaves.")
    assert "Front page" not in page.units[0].text
    assert page.date is None


def test_text_before_the_first_heading_is_labelled_with_the_title_and_top_headings_kept() -> None:
    intro = "An introduction that comes before any heading and explains the two parts. " * 3
    html = f"""<html><head><title>Field guide</title></head><body><article>
    <p>{intro}</p>
    <h1>Birds</h1><p>Birds have feathers and most of them can fly over long distances.</p>
    <h2>Owls</h2><p>Owls hunt at night and turn their heads a long way round.</p>
    <h1>Trees</h1><p>Trees grow rings every year, which tell their age to a careful reader.</p>
    </article></body></html>"""
    page = read_html(html)
    assert [u.label for u in page.units] == ["Field guide", "Birds", "Birds › Owls", "Trees"]
    assert page.units[0].text.startswith("An introduction")


def test_a_long_heading_is_clipped_in_the_label_and_kept_in_the_text() -> None:
    heading = "A heading that goes on " + "and on " * 40 + "until it ends"
    html = f"<html><body><article><h2>{heading}</h2><p>Some words under it.</p>"
    html += "</article></body></html>"
    (unit,) = read_html(html).units
    assert len(unit.label) <= 80
    assert unit.label.endswith("…")
    assert unit.text.splitlines()[0] == heading


def test_a_long_section_is_split_into_numbered_parts() -> None:
    paragraphs = [f"Paragraph {n} " + "of a long section about soil. " * 28 for n in range(12)]
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    html = f"<html><head><title>Soil</title></head><body><article><h2>Long</h2>{body}"
    html += "<h2>Short</h2><p>A short closing section with a few words.</p></article></body></html>"
    page = read_html(html)
    labels = [u.label for u in page.units]
    assert labels[:3] == ["Long", "Long (2)", "Long (3)"]
    assert labels[-1] == "Short"
    long_parts = [u for u in page.units if u.label.startswith("Long")]
    for unit in long_parts:
        assert unit.text.splitlines()[0] == "Long"
        assert len(unit.text) <= UNIT_CHARS + len("Long\n\n")
    joined = " ".join(u.text for u in long_parts)
    for n in range(12):
        assert f"Paragraph {n} of a long" in joined


def test_one_huge_paragraph_is_cut_at_word_boundaries() -> None:
    words = " ".join(f"word{n}" for n in range(3000))  # about 27,000 characters, no breaks
    page = read_html(f"<html><body><article><h2>Wall</h2><p>{words}</p></article></body></html>")
    assert len(page.units) > 5
    assert all(len(u.text) <= UNIT_CHARS + len("Wall\n\n") for u in page.units)
    rebuilt = " ".join(u.text.split("\n\n", 1)[1] for u in page.units)
    assert rebuilt.split() == words.split()


def test_a_base_element_and_a_huge_inline_svg_leave_only_the_text() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg">' + (
        '<text x="1" y="2">SVG LABEL</text><path d="M0 0 L10 10 Z"/>' * 20000
    )
    html = (
        '<html><head><base href="https://elsewhere.example/"><title>Chart</title></head>'
        "<body><article><h1>Rainfall</h1><p>"
        + "Rainfall rose every spring in the decade the chart below covers. " * 5
        + f"</p>{svg}</svg><p>After the chart comes a short conclusion.</p></article></body></html>"
    )
    assert len(html) > 1_000_000
    page = read_html(html)
    text = page_text(page.units)
    assert "SVG LABEL" not in text
    assert "M0 0" not in text
    assert "elsewhere.example" not in text
    assert "After the chart comes a short conclusion." in text


def test_a_german_page_keeps_its_words_and_date() -> None:
    html = """<html lang="de"><head><meta charset="utf-8"><title>Über Kaffee</title>
    <meta name="date" content="2025-11-03"></head><body><article><h1>Über Kaffee</h1>
    <p>Kaffee ist ein schwarzes, koffeinhaltiges Heißgetränk aus gerösteten Bohnen.</p>
    <h2>Zubereitung</h2><p>Die Bohnen werden gemahlen und mit heißem Wasser übergossen; die
    Brühzeit bestimmt den Geschmack.</p><h2>Geschichte</h2><p>Der Kaffee stammt aus der Region
    Kaffa im Südwesten Äthiopiens, wo er schon früh genutzt wurde.</p></article></body></html>"""
    page = read_html(html.encode("utf-8"))
    assert page.title == "Über Kaffee"
    assert page.date == "2025-11-03"
    assert [u.label for u in page.units] == ["Über Kaffee", "Zubereitung", "Geschichte"]
    assert "Heißgetränk" in page.units[0].text
    assert "Südwesten Äthiopiens" in page.units[2].text


def test_a_latin1_page_is_decoded_by_its_declared_charset() -> None:
    html = (
        '<html><head><meta charset="iso-8859-1"><title>Café</title></head><body><article>'
        "<p>Le café crème se boit le matin, à la terrasse, avec un croissant.</p>"
        "</article></body></html>"
    )
    page = read_html(html.encode("iso-8859-1"))
    assert "café crème" in page.units[0].text


def test_malformed_html_is_read() -> None:
    html = (
        "<html><body><article><h2>Broken <b>heading</h2><p>Unclosed paragraph with <i>italic "
        "text about markup handling in parsers<p>Second paragraph</span></td> with stray "
        "closing tags and enough words to count.</article></html"
    )
    page = read_html(html)
    assert page.units[0].label == "Broken heading"
    assert "Unclosed paragraph with italic text" in page.units[0].text
    assert "stray closing tags" in page.units[0].text


def test_a_fragment_without_html_element_is_read() -> None:
    page = read_html("<p>Just one paragraph of an HTML fragment someone saved.</p>")
    assert [u.text for u in page.units] == ["Just one paragraph of an HTML fragment someone saved."]


@pytest.mark.parametrize("html", [b"", b"  \n ", ""])
def test_an_empty_page_is_refused(html: bytes | str) -> None:
    with pytest.raises(FormatError, match=r"^The page is empty\.$"):
        read_html(html)


def test_a_page_with_only_scripts_is_refused() -> None:
    html = "<html><head><title>App</title></head><body><script>render()</script></body></html>"
    with pytest.raises(FormatError, match=r"^Notebook found no readable text on this page\.$"):
        read_html(html)


def test_a_page_over_the_size_cap_is_refused_before_parsing() -> None:
    html = b"<html><body><p>" + b"a" * (10 * 1024 * 1024) + b"</p></body></html>"
    with pytest.raises(FormatError, match="larger than 10 MB"):
        read_html(html)


def test_a_billion_laughs_doctype_is_not_expanded(tmp_path: Path) -> None:
    entities = "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)).replace(
        "&lol0;", "lol"
    )
    html = (
        f"<!DOCTYPE html [{entities}]><html><head><title>Laughs</title></head><body><article>"
        "<h1>Laughs</h1><p>Before &lol9; after. "
        + "Enough ordinary words to make this paragraph count as the page's content. " * 5
        + "</p></article></body></html>"
    )
    (tmp_path / "lol.html").write_text(html)
    # In a child capped at 1 GB of address space: an expansion (3 GB of "lol") dies there.
    script = (
        "import resource, sys, django\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "django.setup()\n"
        "from attachments.formats.web import read_html\n"
        "page = read_html(open(sys.argv[1], 'rb').read())\n"
        "print(sum(len(u.text) for u in page.units))\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "notebook.settings"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "lol.html")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) < 5000


# --- read in a capped child process (attachments.formats.runner.read_html_page) -------------

CHILD_PAGE = (
    b"<!doctype html><html><head><title>Pond life</title></head><body><article>"
    b"<h1>Pond life</h1><p>Frogs lay their eggs in shallow water early in spring.</p>"
    b"<h2>Newts</h2><p>Newts hunt for insect larvae among the weeds at night.</p>"
    b"</article></body></html>"
)


def test_an_html_page_is_read_in_a_child_process(tmp_path, settings):
    from attachments.formats.runner import read_html_page

    path = tmp_path / "pond.html"
    path.write_bytes(CHILD_PAGE)
    title, _date, units = read_html_page(path, url="https://example.org/pond")
    assert title == "Pond life"
    assert [u.label for u in units] == ["Pond life", "Newts"]
    assert "insect larvae" in units[1].text
    # The child has the same deadline as an Office file's: past it, it is stopped.
    settings.FORMAT_TIMEOUT = 0.01
    with pytest.raises(FormatError, match="took longer than"):
        read_html_page(path)


def test_a_page_with_nothing_to_read_says_so_from_the_child(tmp_path, settings):
    from attachments.formats.runner import read_html_page

    path = tmp_path / "empty.html"
    path.write_bytes(b"<!doctype html><html><body><nav><a href='/'>Home</a></nav></body></html>")
    with pytest.raises(FormatError, match="no readable text"):
        read_html_page(path)
    settings.FORMAT_MEMORY_MB = 40  # too little for the reader to start: the child fails
    path.write_bytes(CHILD_PAGE)
    with pytest.raises(FormatError, match=r"more memory|damaged"):
        read_html_page(path)
