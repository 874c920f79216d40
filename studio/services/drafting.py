"""What a chat model writes in Studio, and how what it writes is checked.

With `CHAT_MODEL` set, the reports (briefing, study guide, timeline) are written by the model
from the output's verified quotes, numbered as statements, and the mind map's key topics are
grouped into themes it names. The model sees only the statements, never the whole documents,
and is told to end each sentence with the numbers of the statements it comes from. Each
sentence it sends is judged against the statements it cites (chat.claims.judge, as a chat
answer's sentences are): a sentence that claims something no statement backs, claims
something without citing, or cites a number it was not given is left out, never shown as
fact. What the model leaves unsaid, or says only in sentences that fail, stays quoted.

One model call per output, charged to the asker's model-call budget (core.model_budget);
with the budget spent, the model gone or its reply junk, the output is the quoted one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.utils.translation import get_language, get_language_info
from django.utils.translation import gettext as _
from pydantic import BaseModel, Field

from chat.claims import judge
from core import llm, model_budget
from grounding.citations import MARKER

if TYPE_CHECKING:
    from core.types import User

M = TypeVar("M", bound=BaseModel)

# What every writing request tells the model, after what it writes.
RULES = (
    "Use only what the statements say and add no fact, name, number or date of your own. "
    "End every sentence that states something with the numbers of the statements it comes "
    "from, like [2] or [1][3]; use no other numbers in brackets. Write in {language}."
)


def language() -> str:
    """The name of the language the output is asked in (its UI language), in English."""
    return str(get_language_info(get_language() or settings.LANGUAGE_CODE)["name"])


def rules() -> str:
    return RULES.format(language=language())


def ask(user: User, *, name: str, system: str, prompt: str, reply: type[M],
        max_tokens: int = 2000) -> M | None:  # fmt: skip
    """The model's reply as `reply`, or None: no chat model, the asker's budget spent, the
    model unreachable, refusing or sending junk (core.llm.structured_call logs why)."""
    if not settings.CHAT_MODEL:
        return None
    if not model_budget.spend(user_id=user.pk, feature="studio"):
        return None
    return llm.structured_call(
        name=name, system=system, user=prompt, model=reply, max_tokens=max_tokens,
        timeout=float(settings.CHAT_TIMEOUT),
    )  # fmt: skip


def unmarked(text: str) -> str:
    """A statement as the model reads it (and a line as it is spoken): without its markers
    and Markdown emphasis."""
    return " ".join(re.sub(r"[*_`#>]+", " ", MARKER.sub("", text)).split())


def statements(content: dict[str, Any]) -> dict[int, str]:
    """Each citation number of a quoted output and the statement that quotes it, unmarked."""
    out: dict[int, str] = {}
    for section in content.get("sections") or []:
        for item in section.get("items") or []:
            text = str(item.get("text", ""))
            for n in MARKER.findall(text):
                out.setdefault(int(n), unmarked(text))
    return dict(sorted(out.items()))


def listed(numbered: dict[int, str]) -> str:
    return "\n".join(f"[{n}] {text}" for n, text in numbered.items())


def sources(numbered: dict[int, str]) -> list[dict[str, Any]]:
    """The statements as chat.claims.judge takes its passages: the n-th is `sources[n - 1]`."""
    last = max(numbered, default=0)
    return [{"text": numbered.get(n, "")} for n in range(1, last + 1)]


def backed(text: str, numbered: dict[int, str]) -> str:
    """`text` (one sentence or a few) with only the sentences the statements back: a sentence
    that claims something must cite known statements that back it; a sentence that claims
    nothing (a question, a short link) stays. "" when no sentence left claims something."""
    text = " ".join(str(text).split())
    if not text:
        return ""
    claims = judge(text, sources(numbered))
    kept: list[str] = []
    claimed = False
    lead = ""  # a lead-in ("The chapters follow the hive:") goes with what it introduces
    for claim in claims:
        said = claim.text.strip()
        if not claim.cites and said.endswith((":", "：")):
            lead = f"{lead} {said}".strip()
            continue
        whole, lead = f"{lead} {said}".strip(), ""
        if not set(claim.cites) <= set(numbered):
            continue  # a number the model was not given
        if claim.judged:
            if not claim.backed or not claim.cites:
                continue
            claimed = True
        kept.append(whole)
    return " ".join(kept) if claimed else ""


def label(text: str, limit: int = 60) -> str:
    """A name the model gives (a theme of the mind map): one line, no markers, clipped."""
    flat = " ".join(MARKER.sub("", str(text)).split()).strip(" .:;-")
    return flat if len(flat) <= limit else flat[:limit].rsplit(" ", 1)[0] + "…"


def _numbers(item: dict[str, Any]) -> list[int]:
    return [int(n) for key in ("text", "back") for n in MARKER.findall(str(item.get(key, "")))]


def _written(texts: list[str], numbered: dict[int, str]) -> list[str]:
    return [kept for kept in (backed(t, numbered) for t in texts) if kept]


# --- Briefing: a summary and each section's key points, written --------------------------


class _Points(BaseModel):
    section: int
    points: list[str] = Field(default_factory=list, max_length=8)


class _Briefing(BaseModel):
    summary: list[str] = Field(default_factory=list, max_length=8)
    sections: list[_Points] = Field(default_factory=list, max_length=60)


def briefing(told: dict[str, Any], user: User) -> list[dict[str, Any]] | None:
    """The quoted briefing's sections written by the model (in the quoted numbering): a
    summary of the whole, then each section's key points; a section the model leaves without
    a backed sentence keeps its quotes. None: nothing of the model's is left."""
    numbered = statements(told)
    cited = [s for s in told["sections"] if any(_numbers(i) for i in s["items"])]
    if not cited:
        return None
    parts = []
    for i, section in enumerate(cited, start=1):
        own = {n: numbered[n] for item in section["items"] for n in _numbers(item)}
        parts.append(f"Section {i}: {unmarked(str(section.get('heading', '')))}\n{listed(own)}")
    system = (
        "You write a briefing document from numbered statements quoted from the reader's "
        "sources, grouped by the section they come from. First a summary of the whole in 2 to "
        "4 sentences, then for each section its key points: 1 to 4 plain sentences that say "
        "what its statements say, shorter and in your own words. " + rules() + " Answer with "
        'JSON: {"summary": ["..."], "sections": [{"section": 1, "points": ["..."]}]}'
    )
    reply = ask(user, name="studio briefing", system=system, prompt="\n\n".join(parts),
                reply=_Briefing)  # fmt: skip
    if reply is None:
        return None
    points: dict[int, list[str]] = {}
    for part in reply.sections:
        if 1 <= part.section <= len(cited):
            points.setdefault(part.section, []).extend(part.points)
    summary = _written(reply.summary, numbered)
    wrote = bool(summary)
    place = {id(s): i for i, s in enumerate(cited, start=1)}
    out: list[dict[str, Any]] = []
    for section in told["sections"]:
        if section.get("summary"):
            if summary:
                section = {**section, "items": [{"text": " ".join(summary), "written": True}]}
        elif id(section) in place:
            own = {n: numbered[n] for item in section["items"] for n in _numbers(item)}
            kept = _written(points.get(place[id(section)], []), own)
            if kept:
                section = {**section, "items": [{"text": t, "written": True} for t in kept]}
                wrote = True
        out.append(section)
    if summary and not any(s.get("summary") for s in told["sections"]):
        out.insert(0, {"heading": _("Summary"), "summary": True,
                       "items": [{"text": " ".join(summary), "written": True}]})  # fmt: skip
    return out if wrote else None


# --- Study guide concepts and timeline events: each item said again -----------------------


class _Said(BaseModel):
    item: int
    text: str = Field(max_length=1200)


class _Items(BaseModel):
    items: list[_Said] = Field(default_factory=list, max_length=80)


def _each_item(items: list[dict[str, Any]], numbered: dict[int, str], user: User, *,
               name: str, task: str, head: Callable[[int, dict[str, Any]], str]
               ) -> list[dict[str, Any]] | None:  # fmt: skip
    """Each item (its quoted statements listed under `head`) said again by the model as
    `task` asks; an item whose sentence fails keeps its quote. None: none written."""
    if not items:
        return None
    owns = [{n: numbered[n] for n in _numbers(item) if n in numbered} for item in items]
    parts = [f"{head(i, item)}\n{listed(own)}"
             for i, (item, own) in enumerate(zip(items, owns, strict=True), start=1)]  # fmt: skip
    system = (
        f"{task} {rules()} Answer with JSON: "
        '{"items": [{"item": 1, "text": "..."}]}, one entry per numbered item.'
    )
    reply = ask(user, name=name, system=system, prompt="\n\n".join(parts), reply=_Items)
    if reply is None:
        return None
    said = {entry.item: entry.text for entry in reply.items}
    out, wrote = [], False
    for i, (item, own) in enumerate(zip(items, owns, strict=True), start=1):
        kept = backed(said.get(i, ""), own) if own else ""
        out.append({**item, "text": kept, "written": True} if kept else item)
        wrote = wrote or bool(kept)
    return out if wrote else None


def concepts(items: list[dict[str, Any]], numbered: dict[int, str],
             user: User) -> list[dict[str, Any]] | None:  # fmt: skip
    """Key concepts (term and the quoted sentence defining it) explained by the model from
    their sentences (`_each_item`)."""
    return _each_item(
        items, numbered, user, name="studio concepts",
        task="You write the key concepts of a study guide from numbered statements quoted from "
        "the reader's sources. For each item (a concept), explain in 1 or 2 plain sentences "
        "what its statements say it is or does.",
        head=lambda i, item: f"Item {i} (concept): {item['term']}",
    )  # fmt: skip


def events(items: list[dict[str, Any]], numbered: dict[int, str],
           user: User) -> list[dict[str, Any]] | None:  # fmt: skip
    """Dated events (the date parsed, the quoted sentence) said in one short sentence each by
    the model (`_each_item`)."""
    return _each_item(
        items, numbered, user, name="studio timeline",
        task="You write a timeline from numbered statements quoted from the reader's sources, "
        "each with the date found in it. For each item (an event), say in one short sentence "
        "what happened or held then, as its statement says; leave the date out (it is shown "
        "beside the sentence).",
        head=lambda i, item: f"Item {i} (event, {item['date']}):",
    )  # fmt: skip


# --- Mind map: the key topics grouped into themes ------------------------------------------


class _Theme(BaseModel):
    name: str = Field(max_length=200)
    topics: list[int] = Field(default_factory=list, max_length=40)


class _Themes(BaseModel):
    themes: list[_Theme] = Field(default_factory=list, max_length=12)


MIN_THEMES = 2


def themes(topics: list[dict[str, Any]], title: str, user: User) -> list[dict[str, Any]] | None:
    """The mind map's key topic nodes grouped by the model into named themes (a theme is a
    name, not a statement: it cites nothing and is shown as a group); the topics it leaves
    out stay after the themes, each topic once. None: fewer than two themes."""
    if len(topics) < 2 * MIN_THEMES:
        return None
    listing = "\n".join(f"{i}. {t['label']}" for i, t in enumerate(topics, start=1))
    system = (
        "You organise the key topics of a set of documents for a mind map. Group the numbered "
        "topics into 2 to 6 themes and give each theme a short name of 1 to 4 words that "
        "covers its topics. Use each topic at most once. Write the names in "
        f"{language()}. Answer with JSON: "
        '{"themes": [{"name": "...", "topics": [1, 2]}]}'
    )
    prompt = f"Documents: {title}\nTopics:\n{listing}"
    reply = ask(user, name="studio mind map", system=system, prompt=prompt, reply=_Themes,
                max_tokens=800)  # fmt: skip
    if reply is None:
        return None
    used: set[int] = set()
    groups: list[dict[str, Any]] = []
    for theme in reply.themes:
        name = label(theme.name)
        known = [n for n in dict.fromkeys(theme.topics) if 1 <= n <= len(topics)]
        members = [n for n in known if n not in used]
        if not name or not members:
            continue
        used |= set(members)
        groups.append({"text": "", "label": name, "cited": False, "theme": True,
                       "children": [topics[n - 1] for n in members]})  # fmt: skip
    if len(groups) < MIN_THEMES:
        return None
    return groups + [t for n, t in enumerate(topics, start=1) if n not in used]
