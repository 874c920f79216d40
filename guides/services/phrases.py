"""Key phrases by KeyBERT's method, with our embedder: candidates are the 1- to 3-word runs of
a text's sentences (words as they stand, no stop word among them: stopwordsiso's list for the
text's language and English's, which technical text in any language quotes; the repeated ones
when there are enough), scored by cosine similarity to the document's mean passage vector and
picked with maximal marginal relevance, so they differ from each other.

The keybert package would do no more given these candidates and vectors (its own, from
scikit-learn's CountVectorizer, drop stop words inside a phrase, so "use of data" becomes
"use data", which the text never says, and leave Chinese uncut): the cosine and the MMR."""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from functools import cache
from typing import Any

import numpy as np

from core.embeddings import get_embedder
from core.language import detect_language
from core.textutil import cjk_ratio
from grounding.evidence import sentences, terms

MMR_LAMBDA = 0.7  # weight of centrality against difference from what was already picked
PHRASE_LAMBDA = 0.6  # the same for key phrases (KeyBERT's diversity 0.4)
MAX_TOPICS = 6
MAX_PHRASES = 120  # candidates embedded, the most frequent
MAX_WORDS = 3
_WORD = re.compile(r"[^\W_](?:[\w'’.+-]*[^\W_])?")


def matrix(vectors: list[Any]) -> np.ndarray:
    rows = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    normalised: np.ndarray = rows / np.where(norms == 0, 1.0, norms)
    return normalised


def mmr(
    rows: np.ndarray,
    k: int,
    groups: list[int] | None = None,
    centre: np.ndarray | None = None,
    weight: float = MMR_LAMBDA,
) -> list[int]:
    """Rows picked by maximal marginal relevance: centrality (cosine to `centre`, by default
    the mean row) against the highest similarity to a row already picked. With `groups`
    (the source of each row), no group gets more than its share until the others run out."""

    if not len(rows):
        return []
    mean = rows.mean(axis=0) if centre is None else centre
    central = rows @ (mean / (float(np.linalg.norm(mean)) or 1.0))
    picked: list[int] = []
    closest = np.full(len(rows), -1.0, dtype=np.float32)
    share = math.ceil(k / len(set(groups))) if groups else k
    taken: Counter[int] = Counter()
    while len(picked) < min(k, len(rows)):
        score = weight * central - (1 - weight) * np.maximum(closest, 0)
        score[picked] = -np.inf
        if groups:
            full = [i for i, g in enumerate(groups) if taken[g] >= share]
            if len(full) < len(rows) - len(picked):
                score[full] = -np.inf
        best = int(np.argmax(score))
        picked.append(best)
        if groups:
            taken[groups[best]] += 1
        closest = np.maximum(closest, rows @ rows[best])
    return picked


@cache
def stop_words(language: str) -> frozenset[str]:
    # stopwordsiso reads every language's list: only when a guide is written
    import stopwordsiso

    codes = [code for code in {"en", language} if code and stopwordsiso.has_lang(code)]
    return frozenset(w.casefold() for w in stopwordsiso.stopwords(codes)) if codes else frozenset()


def _words(sentence: str, chinese: bool) -> list[tuple[int, int]]:
    """Where the words of a sentence are: jieba's for Chinese, else runs of letters and digits
    (with the dots, hyphens and apostrophes inside: "read.table", "e-mail")."""
    if not chinese:
        return [m.span() for m in _WORD.finditer(sentence)]
    # jieba only for Chinese text (its dictionary loads on first use)
    import jieba

    jieba.setLogLevel(60)
    return [(s, e) for w, s, e in jieba.tokenize(sentence) if _WORD.fullmatch(w)]


def _worth(spellings: Counter[str], words: int) -> bool:
    """A phrase worth a topic: several words, or one that is a name or code: a capital, a
    digit or a dot inside ("UrlFont", "data.frame") or capitalised wherever it occurs
    ("Notenstich"). A plain word ("programming", "Importing" opening a sentence) or a single
    CJK word (jieba's "文档") says little on its own."""
    phrase = spellings.most_common(1)[0][0]
    if cjk_ratio(phrase) and words == 1:
        return False
    return words > 1 or bool(re.search(r"[A-Z0-9.]", phrase[1:])) or (
        len(phrase) >= 3 and not any(s.islower() for s in spellings))  # fmt: skip


def _in_address(text: str, start: int, end: int) -> bool:
    """Whether the word at text[start:end] is part of a path or an address."""
    return "/" in text[start - 1 : start] + text[end : end + 1] or "@" in text[start - 1 : end + 1]


def candidates(texts: Iterable[str]) -> Counter[str]:
    """Candidate phrases of these texts by how often they occur (see the module docstring):
    no stop word (of each text's language) or number in them, no punctuation between their
    words, not inside a path or an address ("CRAN.R-project.org/…"). The most frequent
    spelling of each stands for it."""
    counts: dict[tuple[str, int], Counter[str]] = defaultdict(Counter)
    for text in texts:
        chinese, stop = cjk_ratio(text) > 0.1, stop_words(detect_language(text))
        for sentence in sentences(text):
            spans = [(s, e) for s, e in _words(sentence, chinese)
                     if sentence[s:e].casefold() not in stop and not _in_address(sentence, s, e)
                     and re.search(r"[^\W\d_]", sentence[s:e])]  # fmt: skip
            for i, (start, _) in enumerate(spans):
                for j in range(i, min(i + MAX_WORDS, len(spans))):
                    if j > i and sentence[spans[j - 1][1] : spans[j][0]].strip():
                        break  # punctuation, or a stop word, between the words
                    phrase = sentence[start : spans[j][1]]
                    counts[phrase.casefold(), j - i + 1][phrase] += 1
    return Counter({spelt.most_common(1)[0][0]: spelt.total()
                    for (_, words), spelt in counts.items() if _worth(spelt, words)})  # fmt: skip


def key_phrases(
    texts: list[str], centre: np.ndarray, *, exclude: Iterable[str] = (), k: int = MAX_TOPICS
) -> list[str]:
    """Up to `k` key phrases of these texts for a document whose mean vector is `centre`:
    the candidates closest to it, with diversity, none inside `exclude` (the title) and none
    whose content words are those of one picked before. Raises EmbeddingError."""
    excluded = [e.casefold() for e in exclude]
    counted = candidates(texts)
    pool = [p for p, n in counted.most_common() if not any(p.casefold() in e for e in excluded)]
    repeated = [p for p in pool if counted[p] > 1]
    pool = (repeated if len(repeated) >= k else pool)[:MAX_PHRASES]
    if not pool:
        return []
    rows = matrix(get_embedder().embed(pool))
    out: list[str] = []
    for i in mmr(rows, 2 * k, centre=centre, weight=PHRASE_LAMBDA):
        words = terms(pool[i])
        if words and not any(words <= terms(p) or terms(p) <= words for p in out):
            out.append(pool[i])
    return out[:k]
