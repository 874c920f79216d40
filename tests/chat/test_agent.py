"""The agent path without a language model: tools (and their authorization), the extractive
answerer over a real ingested PDF, citation verification, persistence and the evaluation
command."""

from __future__ import annotations

import dataclasses
import json
import shutil
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.core.management import call_command

from chat import services
from chat.agent import generate
from chat.events import AnswerError, Finished, Token, ToolActivity
from chat.models import Message
from chat.tools import AnswerRequest, tools_for
from grounding.citations import quotable, verify
from grounding.evidence import sentences
from notes.services import note_create
from tests.factories import NotebookFactory
from tests.fixtures.documents import EVAL_PDFS, eval_pdf, ingest, upload

pytestmark = pytest.mark.django_db
CANARY = "zqxjcanary"
# manual.pdf (tests/samples/) answers it with the first sentence of its page 3, GOLD_PAGE.
QUESTION = "Why does Lantern refuse to overwrite the public folder?"
GOLD_PAGE = 3


@pytest.fixture
def library(alice, bob):
    notebook = NotebookFactory.create(owner=alice, title="Tools")
    note = note_create(notebook=notebook, author=alice, title="Lantern manual")
    attachment = ingest(upload(alice, note, "manual.pdf"))
    assert attachment.status == "ready"
    bobs_notebook = NotebookFactory.create(owner=bob)
    bobs = note_create(
        notebook=bobs_notebook, author=bob, title="Bob", body=f"{CANARY} public folders publish"
    )
    return {"notebook": notebook, "note": note, "attachment": attachment, "bobs": bobs}


def ask(conversation, question: str = QUESTION) -> tuple[Message, list[tuple[str, dict[str, Any]]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    _, pending = services.message_ask(conversation=conversation, content=question)
    answer = generate(pending.pk, lambda event, data: events.append((event, data)))
    assert answer is not None
    return answer, events


def test_the_extractive_answer_cites_verified_sentences_of_the_right_page(alice, library):
    conversation = services.conversation_create(
        owner=alice, notebook=library["notebook"], note=library["note"]
    )
    answer, events = ask(conversation)
    assert answer.status == "complete"
    assert answer.answerer == "extractive"
    assert "never overwrites a public folder" in answer.content  # the page's answer
    assert answer.citations
    assert {c["file"] for c in answer.citations} == {"manual.pdf"}
    assert GOLD_PAGE in {c["page"] for c in answer.citations}
    # The page's text, or it with the words cut at line ends whole (the quotes read them so).
    page_text = quotable(library["attachment"].pages.get(number=GOLD_PAGE).text)
    assert any(c["quote"] in page_text for c in answer.citations)
    assert answer.metadata["unverified_citations"] == 0
    assert (answer.metadata["abstained"], answer.metadata["grounding"]) == (False, "cited")
    assert answer.confidence in ("high", "medium", "low")
    assert 1 <= len(answer.follow_ups) <= 3
    assert answer.retrieved
    assert answer.tool_calls[0]["name"] == "document_search"
    assert set(answer.timings) >= {"reformulation", "retrieval", "first_token", "total"}
    kinds = [event for event, _ in events]
    assert kinds[:2] == ["searched", "tool"]  # what is searched is known before searching
    assert kinds.count("token") == answer.content.count("\n\n") + 1  # a sentence at a time
    assert kinds[-1] == "done"
    assert "citation" in kinds
    streamed = "".join(data["text"] for event, data in events if event == "token")
    assert streamed == answer.content


def test_it_abstains_when_the_sources_do_not_answer(alice, library):
    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    answer, _ = ask(conversation, "What is the boiling point of liquid nitrogen in Kelvin?")
    assert answer.metadata["abstained"] is True
    assert answer.citations == []
    assert "can't answer this" in answer.content or "don't seem to answer this" in answer.content
    assert answer.confidence == "low"


def test_bob_never_reaches_alices_answers_or_tools(alice, library):
    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    answer, events = ask(conversation, "Why do public folders publish?")  # bob's note's words
    assert CANARY not in json.dumps([answer.content, answer.citations, answer.retrieved,
                                     answer.follow_ups, events])  # fmt: skip
    context = AnswerRequest(user=alice, notebook=library["notebook"])
    tools = {tool.name: tool for tool in tools_for(context)}
    bobs = library["bobs"].pk
    for name, arguments in [("note_read", {"note_id": bobs}),
                            ("document_search", {"query": CANARY, "note_id": bobs}),
                            ("note_search", {"query": CANARY})]:  # fmt: skip
        result = tools[name].run(context, arguments)
        assert CANARY not in result.content
        assert all(CANARY not in str(p) for p in result.passages)
    assert "No note" in tools["note_read"].run(context, {"note_id": bobs}).content


def test_a_note_chat_has_only_that_notes_pdfs(alice, library):
    other = note_create(notebook=library["notebook"], author=alice, title="Other", body="x")
    context = AnswerRequest(user=alice, notebook=library["notebook"], note=library["note"])
    tools = {tool.name: tool for tool in tools_for(context)}
    assert set(tools) == {"document_search"}
    # No note_id is offered in a note chat; one invented anyway is ignored: still this note.
    schema = tools["document_search"].arguments(context).model_json_schema()
    assert "note_id" not in schema["properties"]
    result = tools["document_search"].run(context, {"query": "public folder", "note_id": other.pk})
    assert result.passages
    assert {p["note_id"] for p in result.passages} == {library["note"].pk}
    bad = tools["document_search"].run(context, '{"query": 3, "limit": 99}')
    assert bad.content.startswith("Invalid arguments for document_search")


@pytest.mark.eval  # a word TeX cut at a line end, in a real document: no sample has one
def test_the_model_reads_words_cut_at_line_ends_whole(alice):
    """url.pdf's page 4 has "com-\nmands": the passage the model reads says "commands", and
    a quote of it is verified against the page."""
    notebook = NotebookFactory.create(owner=alice, title="TeX")
    note = note_create(notebook=notebook, author=alice, title="URLs in LaTeX")
    attachment = ingest(upload(alice, note, "url.pdf", eval_pdf("url.pdf")))
    assert "com-\nmands" in attachment.pages.get(number=4).text
    context = AnswerRequest(user=alice, notebook=notebook, note=note)
    tools = {tool.name: tool for tool in tools_for(context)}
    result = tools["document_search"].run(context, {"query": "UrlBreaks UrlBigBreaks list macros"})
    assert "given by the two commands (list macros)" in result.content
    assert "com-\nmands" not in result.content


def test_citations_are_shown_only_when_the_quote_is_on_the_page(library):
    page = library["attachment"].pages.get(number=1).text
    sentence = next(s for s in sentences(page) if len(s) > 40)
    source = {"kind": "document", "id": 1, "attachment_id": library["attachment"].pk,
              "file": "manual.pdf", "page": 1}  # fmt: skip
    spaced = sentence.replace(" ", "  \n ")  # whitespace differences do not matter
    shown, refused = verify(
        "A [1]. B [2]. C [1].", [source, source], {1: [spaced], 2: ["A sentence nobody wrote."]}
    )
    assert [c["n"] for c in shown] == [1]
    assert shown[0]["quote"] == " ".join(sentence.split())
    assert refused == 1
    assert verify("See [7].", [source], {7: [sentence]}) == ([], 1)  # no such source
    other = next(s for s in sentences(page) if len(s) > 40 and s != sentence)
    both, refused = verify("X [1]. Y [1].", [source], {1: [sentence, other, "made up"]})
    assert [c["quote"] for c in both] == [" ".join(sentence.split()), " ".join(other.split())]
    assert refused == 0  # the source is cited with verified quotes


def test_an_answer_is_generated_once(alice, library):
    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    _, pending = services.message_ask(conversation=conversation, content=QUESTION)
    assert generate(pending.pk, lambda *a: None) is not None
    assert generate(pending.pk, lambda *a: None) is None  # a reconnect does not start another


class Failing:
    name = "llm"
    notice = ""

    def run(self, question, history, context):
        yield ToolActivity("document_search", {}, "Searching", 0.0, 0)
        yield Token("Partial ")
        raise AnswerError("The language model at 127.0.0.1 did not answer.")


class Recording:
    name = "llm"
    notice = ""

    def __init__(self):
        self.history = None

    def run(self, question, history, context):
        self.history = history
        yield Token(f"Echo: {question}")
        yield Finished(confidence="low")


def test_a_failed_answer_keeps_the_question_and_can_be_retried(alice, library):
    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    question, pending = services.message_ask(conversation=conversation, content=QUESTION)
    events: list[tuple[str, dict[str, Any]]] = []
    failed = generate(pending.pk, lambda e, d: events.append((e, d)), answerer=Failing())
    assert failed is not None
    assert failed.status == "error"
    assert failed.error == "The language model at 127.0.0.1 did not answer."
    assert failed.content == "Partial "
    assert events[-1] == ("error", {"message_id": pending.pk, "message": failed.error})
    assert Message.objects.filter(pk=question.pk, content=QUESTION).exists()
    retried = services.message_retry(message=failed)
    assert (retried.status, retried.content, retried.error) == ("pending", "", "")
    with pytest.raises(ValidationError):
        services.message_retry(message=retried)
    again = generate(pending.pk, lambda *a: None)
    assert again is not None
    assert again.status == "complete"


def test_history_reaches_the_answerer(alice, library):
    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    first, _ = ask(conversation, "first question about the public folder")
    recording = Recording()
    _, pending = services.message_ask(conversation=conversation, content="second one")
    generate(pending.pk, lambda *a: None, answerer=recording)
    assert recording.history == [("user", "first question about the public folder"),
                                 ("assistant", first.content)]  # fmt: skip


@pytest.mark.parametrize(
    ("content", "code"), [("", "required"), ("   \n", "required"), ("x" * 4001, "too_long")]
)
def test_bad_questions_are_refused_and_nothing_is_saved(alice, library, content, code):
    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    with pytest.raises(ValidationError) as refused:
        services.message_ask(conversation=conversation, content=content)
    assert refused.value.error_dict["content"][0].code == code
    assert not conversation.messages.exists()


def test_a_question_with_nothing_ready_to_search_is_refused(alice):
    notebook = NotebookFactory.create(owner=alice)
    note = note_create(notebook=notebook, author=alice, title="Empty")
    conversation = services.conversation_create(owner=alice, notebook=notebook, note=note)
    with pytest.raises(ValidationError, match="nothing to search here yet"):
        services.message_ask(conversation=conversation, content="Anything?")
    assert not conversation.messages.exists()


@pytest.mark.eval
@pytest.mark.slow
def test_evaluate_answers_runs_on_a_small_set(alice, tmp_path, capsys):
    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    shutil.copy(EVAL_PDFS / "url.pdf", pdfs / "url.pdf")
    rows = [json.loads(line) for line in (EVAL_PDFS.parent / "questions.jsonl").read_text()
            .splitlines() if '"url.pdf"' in line]  # fmt: skip
    rows.append({
        "id": "none-1", "question": "Who painted the Mona Lisa?", "question_lang": "en",
        "file": "url.pdf", "pages": [], "answer_keywords": [], "kind": "unanswerable",
    })  # fmt: skip
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(json.dumps(r) for r in rows))
    chats = tmp_path / "conversations.jsonl"
    chats.write_text(json.dumps({"id": "conv-1", "lang": "en", "turns": [
        {"question": "What does the url package do?", "file": "url.pdf", "pages": [1],
         "answer_keywords": ["url"], "kind": "first"},
        {"question": "How do I change the font it uses?", "file": "url.pdf", "pages": [4],
         "answer_keywords": ["urlstyle"], "kind": "followup"},
    ]}))  # fmt: skip
    out, kept = tmp_path / "answers.json", tmp_path / "kept.jsonl"
    call_command("evaluate_answers", "--pdfs", pdfs, "--questions", questions, "--json", out,
                 "--keep", kept, "--conversations", chats)  # fmt: skip
    figures = json.loads(out.read_text())
    assert figures["answerer"] == "extractive"
    assert figures["overall"]["n"] == len(rows) + 2
    assert figures["by_kind"]["followup"]["n"] == 1
    assert (figures["overall"]["errors"], figures["overall"]["unsourced"]) == (0, 0)
    answers = [json.loads(line) for line in kept.read_text().splitlines()]
    assert [a["id"] for a in answers] == [r["id"] for r in rows] + ["conv-1-1", "conv-1-2"]
    assert answers[0]["tool_calls"][0]["name"] == "document_search"
    assert figures["overall"]["verified_citations"] == 1.0
    assert figures["by_kind"]["unanswerable"]["abstained_unanswerable"] == 1.0
    assert figures["overall"]["cites_gold_page"] > 0
    assert "keywords" in capsys.readouterr().out


def test_an_answerer_gets_one_request_built_before_it_runs_and_cannot_change_it(alice, library):
    """The request is complete when the answerer starts (what retrieval searches, the chat's
    scope) and frozen: a stage cannot change what a later stage reads. Only the running record
    (numbered passages, notices) grows."""
    seen: list[Any] = []

    class Recording:
        name, notice = "extractive", ""

        def run(self, question, history, context):
            seen.append(context)
            try:
                context.search_query = "something else"
            except dataclasses.FrozenInstanceError:
                seen.append("frozen")
            context.add_source({"kind": "note", "id": 1})
            yield Token("Nothing.")
            yield Finished(abstained=True)

    conversation = services.conversation_create(owner=alice, notebook=library["notebook"])
    _, pending = services.message_ask(conversation=conversation, content=QUESTION)
    answer = generate(pending.pk, lambda event, data: None, answerer=Recording())
    assert answer is not None
    assert answer.status == "complete"
    request, frozen = seen
    assert frozen == "frozen"
    assert request.search_query == QUESTION
    assert request.conversation == conversation
    assert request.sources == [{"kind": "note", "id": 1}]
