"""Claims, not answers, are checked: each sentence of a chat model's answer must be backed by
the passage it cites.

A verified quote (grounding.citations.verify) proves that a sentence occurs on the cited page; it
says nothing about the sentence the marker follows. So every sentence of the answer is judged
on its own against the best-matching span (one sentence, or two in a row) of the passage it
cites, or of any passage found for the question when it cites none:

- *in words*: the share of its content words (grounding.evidence.terms: the search stack's
  stemmed, case-folded words) that the span holds, each word weighed by how rare it is among
  the sentences of the answer's passages (inverse document frequency). A word no passage
  holds ("Napoleon", "1805") weighs most, so an invented clause sinks a sentence however many
  true words surround it;
- *in meaning*: the embedding similarity of the sentence to that span.

A sentence is backed when its words reach CLAIM_COVERAGE, or when they reach
CLAIM_PARAPHRASE_COVERAGE and its meaning CLAIM_SIMILARITY (a paraphrase; docs/chat.md has how
they were chosen); while the embedding model is away, by words alone. Headings, code,
questions, exclamations, sentences of fewer than MIN_CLAIM_TERMS content words and lead-ins
(ending in a colon) of fewer than one more claim nothing and are not judged.

The agent strips the markers of an unbacked sentence (it loses its chip), records where each
one is in the saved text (`metadata.claims`) and the page marks it inline; the answer's
grounding is the share of its sentences that are backed.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from core.embeddings import get_embedder, warming_up
from core.language import language_of
from core.markdown import block_lines, plain_text
from grounding.citations import MARKER
from grounding.evidence import passage_sentences, sentence_bounds, terms
from grounding.sentence_vectors import embed_texts, similarities

logger = logging.getLogger(__name__)

# Chosen on ../shared/eval with the fake model's strict and embellish profiles (docs/chat.md,
# "Claims"): a sentence is backed when the best span of its passage holds CLAIM_COVERAGE of
# its weighed words, or, said in other words, CLAIM_PARAPHRASE_COVERAGE of them and is
# CLAIM_SIMILARITY close in meaning. docs/chat.md has the figures.
CLAIM_COVERAGE = 0.8
CLAIM_PARAPHRASE_COVERAGE = 0.5
CLAIM_SIMILARITY = 0.75
MIN_CLAIM_TERMS = 2
SPANS_EMBEDDED = 3
# A claim may join sentences in a row: a title page's lines are sentences of their own.
RUNS = (2, 3, 4, 5)  # of each passage, the spans best in words are compared in meaning
# Private-use characters the page puts around an unbacked sentence before rendering it
# (chat.rendering); removed from the model's text first so it cannot forge a mark.
OPEN, CLOSE = "\ue000", "\ue001"
# Characters before a marker that belong to the marker ("claim [1]" → "claim").
_MARKER_WITH_SPACE = re.compile(r"\s*\[(\d{1,3})\]")
_LIST_PREFIX = re.compile(r"^[ \t]*(?:>[ \t]?)*[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)?")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{2,}")


@dataclass
class Claim:
    """A sentence of an answer: where it is in the text, the sources it cites, the verdict."""

    start: int
    end: int
    text: str
    cites: list[int] = field(default_factory=list)
    judged: bool = True  # False: claims nothing (a question, an introduction, too short)
    backed: bool = False
    coverage: float = 0.0
    similarity: float = 0.0


def clean(content: str) -> str:
    """The model's text without the characters the page uses to mark claims."""
    return content.replace(OPEN, "").replace(CLOSE, "")


def segments(content: str) -> list[Claim]:
    """The sentences of a Markdown answer with their offsets in it, in order: paragraphs, list
    items and table rows split into sentences (grounding.evidence's segmentation); headings and
    code left out. A marker after a full stop ("… page 33. [1]") belongs to the sentence it
    follows."""
    starts = [0]
    for line in content.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    lines = content.splitlines(keepends=True)
    out: list[Claim] = []
    for first, last, kind in block_lines(content):
        # The block's text without each line's list or quote prefix, and where each
        # character of it is in the answer.
        text: list[str] = []
        where: list[int] = []
        for i in range(first, min(last, len(lines))):
            line = lines[i].rstrip("\r\n")
            if kind == "row":
                if _TABLE_RULE.match(line):
                    continue
                skip = len(line) - len(line.lstrip(" \t|"))
                line = line.rstrip(" \t|")
            else:
                skip = _LIST_PREFIX.match(line).end()  # type: ignore[union-attr]
            if text:
                text.append(" ")
                where.append(starts[i] + skip - 1)
            text.append(line[skip:])
            where.extend(range(starts[i] + skip, starts[i] + len(line)))
        joined = "".join(text)
        pieces = [
            piece
            for a, b in sentence_bounds(joined)
            for piece in _after_colons(joined, a, b)
            if joined[piece[0] : piece[1]].strip()
        ]
        # "… page 33. [1] The next …": the markers go with the sentence before them.
        merged: list[list[int]] = []
        for a, b in pieces:
            lead = re.match(r"(?:\s*\[\d{1,3}\])+", joined[a:b])
            if lead and merged:
                merged[-1][1] = a + lead.end()
                a += lead.end()
            if joined[a:b].strip():
                merged.append([a, b])
        for a, b in merged:
            while a < b and joined[a].isspace():
                a += 1
            while b > a and joined[b - 1].isspace():
                b -= 1
            if a < b:
                start, end = where[a], where[b - 1] + 1
                sentence = content[start:end]
                cites = [int(n) for n in MARKER.findall(sentence)]
                out.append(Claim(start, end, sentence, list(dict.fromkeys(cites))))
    return out


# A colon followed by a space introduces what follows; a citation
# marker followed by a new sentence ends a claim ("… R Core Team [1] In addition, …").
_CUT = re.compile(
    r"(?P<colon>[:：])\s+"
    r"|(?<=\[\d\])\s+(?=[\"“‘(]?[A-Z\u00C0-\u024F])"
    r"|(?<=\[\d\d\])\s+(?=[\"“‘(]?[A-Z\u00C0-\u024F])"
)


def _after_colons(text: str, a: int, b: int) -> list[tuple[int, int]]:
    """A sentence cut after a colon that introduces another ("The documents say: The url
    package …"; the introduction claims nothing of its own) and after a marker that a new
    sentence follows without a full stop."""
    out = []
    for match in _CUT.finditer(text, a, b):
        out.append((a, match.start() + (1 if match.group("colon") else 0)))
        a = match.end()
    return [*out, (a, b)]


def _claims_something(claim: Claim, language: str) -> bool:
    said = plain_text(MARKER.sub("", claim.text)).strip()
    if not said or said.endswith(("?", "？", "!", "！")):
        return False
    # A lead-in ("The documents say:") claims something only when it says more than that
    # ("The package offers three options for line breaks:").
    lead_in = said.endswith((":", "："))
    return len(terms(said, language)) >= MIN_CLAIM_TERMS + (1 if lead_in else 0)


@dataclass
class _Span:
    n: int
    text: str
    chunk: int | None
    terms: set[str]
    pair: bool = False  # sentences in a row


def _spans(n: int, source: dict[str, Any], language: str) -> list[_Span]:
    """A passage's sentences, and runs of RUNS of them in a row."""
    chunk = int(source["chunk_id"]) if source.get("kind") == "document" else None
    # A passage too short to hold a sentence (a note of one line) is a span of its own.
    found = passage_sentences(source, every=True) or [" ".join(str(source.get("text", "")).split())]
    runs = [" ".join(found[i : i + k]) for k in RUNS for i in range(len(found) - k + 1)]
    return [_Span(n, text, chunk, terms(text, language)) for text in found] + [
        _Span(n, text, chunk, terms(text, language), pair=True) for text in runs
    ]


def judge(content: str, sources: Sequence[dict[str, Any]]) -> list[Claim]:
    """The sentences of `content` (saved Markdown, markers as the model wrote them), each
    judged against the passages it cites (`sources[n - 1]`), or all of them when it cites
    none."""
    claims = segments(content)
    # One language for the answer and its passages, theirs: words stemmed by different
    # stemmers never meet.
    language = language_of(" ".join(str(s.get("text", "")) for s in sources) or content)
    spans: dict[int, list[_Span]] = {
        n: _spans(n, source, language) for n, source in enumerate(sources, start=1)
    }
    # Rarity of each word among the passages' sentences (the pairs would count it twice).
    singles = [s.terms for n in spans for s in spans[n] if not s.pair]
    total = len(singles) or 1
    frequency: dict[str, int] = {}
    for said in singles:
        for term in said:
            frequency[term] = frequency.get(term, 0) + 1

    def weight(term: str) -> float:
        return math.log((total + 1) / (frequency.get(term, 0) + 0.5))

    # Candidates of each judged claim: the spans best in words, to be compared in meaning.
    candidates: dict[int, list[tuple[_Span, float]]] = {}
    for i, claim in enumerate(claims):
        if not _claims_something(claim, language):
            claim.judged = False
            continue
        wanted = terms(plain_text(MARKER.sub("", claim.text)), language)
        full = sum(weight(t) for t in wanted) or 1.0
        pool = [s for n in (claim.cites or list(spans)) for s in spans.get(n, [])]
        scored = sorted(
            ((s, sum(weight(t) for t in wanted & s.terms) / full) for s in pool),
            key=lambda pair: -pair[1],
        )
        if claim.cites:  # what each cited passage offers at best
            best: list[tuple[_Span, float]] = []
            for n in claim.cites:
                best += [pair for pair in scored if pair[0].n == n][:SPANS_EMBEDDED]
        else:
            best = scored[:SPANS_EMBEDDED]
        candidates[i] = best
        claim.coverage = max((c for _, c in best), default=0.0)
    vectors = _similarities(claims, candidates)
    for i, best in candidates.items():
        claim = claims[i]
        if claim.coverage >= CLAIM_COVERAGE or vectors is None:
            claim.backed = claim.coverage >= CLAIM_COVERAGE
            if vectors is not None:
                claim.similarity = max(vectors[i], default=0.0)
            continue
        for (_, coverage), similarity in zip(best, vectors[i], strict=True):
            if coverage >= CLAIM_PARAPHRASE_COVERAGE and similarity >= CLAIM_SIMILARITY:
                claim.backed = True
                claim.coverage, claim.similarity = coverage, similarity
                break
        else:
            claim.similarity = max(vectors[i], default=0.0)
    return claims


def _similarities(
    claims: list[Claim], candidates: dict[int, list[tuple[_Span, float]]]
) -> dict[int, list[float]] | None:
    """Each candidate span's embedding similarity to its claim; None when the embedding model
    is loading or away (the claims are then judged by words alone)."""
    if not candidates or warming_up():
        return None if candidates else {}
    said = [plain_text(MARKER.sub("", claims[i].text)) for i in candidates]
    items = [(span.chunk, span.text) for best in candidates.values() for span, _ in best]
    try:
        asked, vectors = embed_texts(
            get_embedder(), said, items, timeout=settings.EMBEDDING_QUERY_TIMEOUT
        )
    except Exception:
        logger.warning("could not embed the claims of an answer; judging them by words only")
        return None
    out: dict[int, list[float]] = {}
    row = 0
    for k, (i, best) in enumerate(candidates.items()):
        out[i] = similarities(asked[k], vectors[row : row + len(best)]) if best else []
        row += len(best)
    return out


def strip_unbacked(content: str, claims: list[Claim]) -> str:
    """`content` without the markers of unbacked sentences (they lose their chips), with
    sentinels OPEN/CLOSE around each unbacked sentence so its place survives renumbering."""
    out: list[str] = []
    pos = 0
    for claim in claims:
        if not claim.judged or claim.backed:
            continue
        out.append(content[pos : claim.start])
        sentence = _MARKER_WITH_SPACE.sub("", claim.text)
        out.append(f"{OPEN}{sentence}{CLOSE}")
        pos = claim.end
    out.append(content[pos:])
    return "".join(out)


def locate(marked: str) -> tuple[str, list[dict[str, Any]]]:
    """The text without sentinels, and where each marked (unbacked) sentence is in it."""
    text: list[str] = []
    found: list[dict[str, Any]] = []
    length = 0
    start = 0
    for piece in re.split(f"([{OPEN}{CLOSE}])", marked):
        if piece == OPEN:
            start = length
        elif piece == CLOSE:
            found.append({"start": start, "end": length, "text": "".join(text)[start:length]})
        else:
            text.append(piece)
            length += len(piece)
    return "".join(text), found


def summary(claims: list[Claim], unbacked: list[dict[str, Any]]) -> dict[str, Any]:
    """What `metadata.claims` holds: judged sentences, backed ones, the share backed, the
    unbacked ones with their offsets in the saved text, and each judged sentence's
    [coverage, similarity, backed] in order."""
    judged = [c for c in claims if c.judged]
    backed = sum(c.backed for c in judged)
    return {
        "sentences": len(judged),
        "backed": backed,
        "share": round(backed / len(judged), 4) if judged else None,
        "unbacked": unbacked,
        "scores": [[round(c.coverage, 3), round(c.similarity, 3), c.backed] for c in judged],
    }


def unbacked_spans(message_metadata: Any, content: str) -> list[tuple[int, int]]:
    """The (start, end) of each unbacked sentence of a saved answer, if they still fit."""
    claims = message_metadata.get("claims") if isinstance(message_metadata, dict) else None
    rows = claims.get("unbacked") if isinstance(claims, dict) else None
    out: list[tuple[int, int]] = []
    last = 0
    for row in rows if isinstance(rows, list) else []:
        try:
            start, end = int(row["start"]), int(row["end"])
        except (KeyError, TypeError, ValueError):
            continue
        if last <= start < end <= len(content):
            out.append((start, end))
            last = end
    return out


def backed_text(message: Any) -> str:
    """What of an answer may feed a later search: its text without the sentences no source
    backs, and nothing of an answer shown as not backed at all."""
    metadata = message.metadata if isinstance(message.metadata, dict) else {}
    if metadata.get("grounding") == "unsourced":
        return ""
    content = message.content
    out, pos = [], 0
    for start, end in unbacked_spans(metadata, content):
        out.append(content[pos:start])
        pos = end
    out.append(content[pos:])
    return "".join(out)
