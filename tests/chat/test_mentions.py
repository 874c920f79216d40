"""The composer's `@` / `@@` suggestions: ranking (pure), what each kind offers, the folder
thresholds, and that another user's names never show up (chat.mentions, chat:mentions and
GET /api/notebooks/{id}/mentions)."""

from __future__ import annotations

import itertools
import json

import pytest
from django.utils import timezone

from attachments.models import NoteAttachment
from chat.mentions import (
    CURRENT_BOOST,
    Candidate,
    folder_counts,
    rank,
    score,
    suggest,
)
from chat.selection import FOLDER_MAX, FOLDER_WARN
from tests.factories import NotebookFactory, NoteFactory

_sha = itertools.count()


def pdf(note, name: str, status: str = "ready") -> NoteAttachment:
    return NoteAttachment.objects.create(
        note=note, original_name=name, file=f"attachments/{name}", size=1,
        sha256=f"{next(_sha):064d}", status=status,
    )  # fmt: skip


def c(kind: str, name: str, path: str, notebook_id: int = 1, ref: str = "") -> Candidate:
    return Candidate(kind=kind, ref=ref or f"{kind}:{name}", name=name, path=path,  # type: ignore[arg-type]
                     notebook_id=notebook_id)  # fmt: skip


# --- ranking (no database) --------------------------------------------------------------------


def test_exact_beats_starts_with_beats_word_start_beats_contains():
    candidates = [
        c("file", "the guide.pdf", "B / n / the guide.pdf"),  # a word starts with it
        c("file", "misguided.pdf", "B / n / misguided.pdf"),  # contains it
        c("file", "guide", "B / n / guide"),  # exact
        c("file", "guidelines.pdf", "B / n / guidelines.pdf"),  # starts with it
    ]
    assert [x.name for x in rank(candidates, "GUIDE")] == [
        "guide", "guidelines.pdf", "the guide.pdf", "misguided.pdf",
    ]  # fmt: skip


def test_a_match_in_the_name_beats_a_match_only_in_the_path():
    in_path = c("file", "a.pdf", "Physics / Notes / a.pdf")  # the notebook starts with it
    in_name = c("file", "physics-contains.pdf", "Misc / x / physics-contains.pdf")
    deep = c("file", "metaphysics.pdf", "Misc / x / metaphysics.pdf")  # name contains it
    assert rank([in_path, in_name, deep], "physics") == [in_name, deep, in_path]
    assert score("physics", in_path) > 0  # still a match


def test_no_match_is_left_out_and_an_empty_term_lists_everything():
    a, b = c("note", "Alpha", "B / Alpha"), c("note", "Beta", "B / Beta")
    assert rank([a, b], "zeta") == []
    assert rank([b, a], "") == [a, b]
    assert rank([a, b], "", limit=1) == [a]


def test_ties_break_by_kind_then_path_the_same_way_every_time():
    folder = c("folder", "Guide", "Guide")
    pdf_b = c("file", "Guide", "Z / n / Guide")
    pdf_a = c("file", "Guide", "A / n / Guide")
    note = c("note", "Guide", "M / Guide")
    for order in itertools.permutations([folder, pdf_b, pdf_a, note]):
        assert rank(list(order), "guide") == [note, pdf_a, pdf_b, folder]


def test_the_current_notebook_wins_ties_but_not_a_better_match():
    here = c("note", "report draft", "Here / report draft", notebook_id=7)
    there = c("note", "report draft", "There / report draft", notebook_id=8)
    better = c("note", "report", "There / report", notebook_id=8)
    assert rank([there, here], "draft", current_notebook_id=7) == [here, there]
    assert rank([here, better], "report", current_notebook_id=7)[0] == better
    assert score("", here, current_notebook_id=7) == 1 + CURRENT_BOOST
    assert rank([there, here], "", current_notebook_id=7) == [here, there]


# --- suggest (database) ------------------------------------------------------------------------


@pytest.fixture
def library(alice, bob):
    """Alice: two notebooks with notes and PDFs (one trashed note, one PDF not ready, one
    empty notebook); Bob: names that would match every term Alice types."""
    tex = NotebookFactory.create(owner=alice, title="TeX")
    urls = NoteFactory.create(notebook=tex, author=alice, title="URLs in LaTeX")
    fonts = NoteFactory.create(notebook=tex, author=alice, title="Fonts")
    gone = NoteFactory.create(notebook=tex, author=alice, title="Old URLs",
                              trashed_at=timezone.now())  # fmt: skip
    physics = NotebookFactory.create(owner=alice, title="Physics")
    optics = NoteFactory.create(notebook=physics, author=alice, title="Optics")
    NotebookFactory.create(owner=alice, title="Empty shelf")
    files = {
        "url": pdf(urls, "url.pdf"),
        "waiting": pdf(urls, "url-waiting.pdf", status="processing"),
        "trashed": pdf(gone, "url-old.pdf"),
        "lens": pdf(optics, "lens.pdf"),
    }
    bobs = NotebookFactory.create(owner=bob, title="Bob's URLs")
    bobs_note = NoteFactory.create(notebook=bobs, author=bob, title="Bob's url notes")
    pdf(bobs_note, "bob-url.pdf")
    return {"tex": tex, "urls": urls, "fonts": fonts, "physics": physics, "optics": optics,
            "files": files, "bobs": bobs}  # fmt: skip


def refs(results) -> list[str]:
    return [r["ref"] for r in results]


def test_at_offers_the_live_notes_of_the_current_notebook_only(alice, library):
    got = suggest(user=alice, notebook=library["tex"], term="", everything=False)
    assert refs(got) == [f"note:{library['fonts'].pk}", f"note:{library['urls'].pk}"]
    assert all(r["kind"] == "note" for r in got)
    assert got[1]["path"] == "TeX / URLs in LaTeX"
    assert suggest(user=alice, notebook=library["tex"], term="optics", everything=False) == []


def test_at_at_offers_notes_ready_pdfs_and_non_empty_folders_everywhere(alice, library):
    got = suggest(user=alice, notebook=library["tex"], term="", everything=True, limit=50)
    files = library["files"]
    assert set(refs(got)) == {
        f"note:{library['urls'].pk}", f"note:{library['fonts'].pk}", f"note:{library['optics'].pk}",
        f"attachment:{files['url'].pk}", f"attachment:{files['lens'].pk}",
        f"notebook:{library['tex'].pk}", f"notebook:{library['physics'].pk}",
    }  # fmt: skip
    pdf_row = next(r for r in got if r["ref"] == f"attachment:{files['url'].pk}")
    assert pdf_row["path"] == "TeX / URLs in LaTeX / url.pdf"
    assert pdf_row["kind"] == "file"
    folder = next(r for r in got if r["ref"] == f"notebook:{library['tex'].pk}")
    assert folder["count"] == 3  # two live notes and url.pdf (not the waiting or trashed one)
    assert folder["url"] == f"/notebooks/{library['tex'].pk}/"
    assert "warning" not in folder


def test_at_at_ranks_the_best_name_first(alice, library):
    # The note's name has a word starting with it; url.pdf has it only in its path.
    got = suggest(user=alice, notebook=library["physics"], term="latex", everything=True)
    assert refs(got) == [f"note:{library['urls'].pk}", f"attachment:{library['files']['url'].pk}"]
    # Both names start with "url": the tie goes to the note (kind), then the path.
    got = suggest(user=alice, notebook=library["physics"], term="url", everything=True)
    assert refs(got)[:2] == [
        f"note:{library['urls'].pk}",
        f"attachment:{library['files']['url'].pk}",
    ]


def test_folder_counts_hold_live_notes_and_ready_pdfs(alice, library):
    counts = folder_counts(user=alice)
    assert counts[library["tex"].pk] == 3
    assert counts[library["physics"].pk] == 2


def test_folders_over_the_thresholds_warn_then_are_refused(alice):
    def shelf(title: str, notes: int):
        notebook = NotebookFactory.create(owner=alice, title=title)
        NoteFactory.create_batch(notes, notebook=notebook, author=alice)
        return notebook

    at_warn = shelf("Shelf at warn", FOLDER_WARN)
    over_warn = shelf("Shelf over warn", FOLDER_WARN + 1)
    at_max = shelf("Shelf at max", FOLDER_MAX)
    over_max = shelf("Shelf over max", FOLDER_MAX + 1)
    got = {r["ref"]: r for r in suggest(user=alice, notebook=at_warn, term="shelf", everything=True)
           if r["kind"] == "folder"}  # fmt: skip
    assert "warning" not in got[f"notebook:{at_warn.pk}"]
    assert f"{FOLDER_WARN + 1} sources" in got[f"notebook:{over_warn.pk}"]["warning"]
    assert not got[f"notebook:{over_warn.pk}"].get("refused")
    assert got[f"notebook:{at_max.pk}"]["warning"]
    assert not got[f"notebook:{at_max.pk}"].get("refused")
    refused = got[f"notebook:{over_max.pk}"]
    assert refused["refused"] is True
    assert f"more than {FOLDER_MAX}" in refused["warning"]


# --- the JSON view and the API ----------------------------------------------------------------


def test_the_view_answers_json_with_the_empty_message(alice_client, library):
    url = "/chats/mentions/"
    got = alice_client.get(url, {"notebook": library["tex"].pk, "q": "url.pdf", "all": "1"})
    assert got.status_code == 200
    body = got.json()
    assert body["empty"] == "No more files found."
    assert body["results"][0]["name"] == "url.pdf"
    none = alice_client.get(url, {"notebook": library["tex"].pk, "q": "nothing-like-it"}).json()
    assert none["results"] == []
    german = alice_client.get(
        url, {"notebook": library["tex"].pk, "q": "x"}, HTTP_ACCEPT_LANGUAGE="de"
    )
    assert german.json()["empty"] != "No more files found."


def test_the_view_refuses_another_users_notebook_and_bad_ids(alice_client, library):
    for notebook in (library["bobs"].pk, "", "x", "99999"):
        response = alice_client.get("/chats/mentions/", {"notebook": notebook, "q": "bob"})
        assert response.status_code == 404
        assert b"Bob" not in response.content


@pytest.mark.parametrize("term", ["", "bob", "url", "b", "Bob's URLs"])
def test_another_users_names_never_appear(alice_client, alice_api, library, term):
    for everything in ("0", "1"):
        page = alice_client.get(
            "/chats/mentions/", {"notebook": library["tex"].pk, "q": term, "all": everything}
        )
        api = alice_api.get(
            f"/api/notebooks/{library['tex'].pk}/mentions", {"q": term, "all": everything == "1"}
        )
        for response in (page, api):
            assert response.status_code == 200
            text = json.dumps(response.json())
            assert "Bob" not in text, (term, everything)
            assert "bob-url" not in text, (term, everything)


def test_the_api_lists_mentions_like_the_page(alice_api, library):
    response = alice_api.get(
        f"/api/notebooks/{library['tex'].pk}/mentions", {"q": "url.pdf", "all": True}
    )
    assert response.status_code == 200
    assert response.json()[0]["name"] == "url.pdf"
    assert response.json()[0]["ref"] == f"attachment:{library['files']['url'].pk}"
    assert alice_api.get(f"/api/notebooks/{library['bobs'].pk}/mentions").status_code == 404
