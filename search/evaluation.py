"""Retrieval metrics for the evaluation set format of ../shared/eval (see its README).

A retrieved chunk is relevant when its file is the question's file and its page is one of the
question's pages. Each gold page counts once (the ideal ranking holds one item per gold page),
so nDCG@10 stays within 0..1 when several chunks of one page are retrieved.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass
class Question:
    id: str
    question: str
    lang: str
    file: str
    pages: list[int]
    kind: str

    @property
    def answerable(self) -> bool:
        return bool(self.pages)


def load_questions(path: Path) -> list[Question]:
    questions = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            questions.append(
                Question(
                    row["id"],
                    row["question"],
                    row.get("question_lang", ""),
                    row["file"],
                    list(row.get("pages", [])),
                    row.get("kind", ""),
                )
            )
    return questions


def score_ranking(question: Question, ranking: Sequence[tuple[str, int]]) -> dict[str, float]:
    """hit@1, hit@5, MRR@10, nDCG@10 for one ranked list of (file name, page)."""
    gold = set(question.pages)
    seen: set[int] = set()
    gains = []
    first_relevant: int | None = None
    for rank, (file, page) in enumerate(ranking[:10], start=1):
        relevant = file == question.file and page in gold
        if relevant and first_relevant is None:
            first_relevant = rank
        gains.append(1.0 if relevant and page not in seen else 0.0)
        if relevant:
            seen.add(page)
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), 10)))
    return {
        "hit@1": float(first_relevant == 1),
        "hit@5": float(first_relevant is not None and first_relevant <= 5),
        "mrr@10": 1 / first_relevant if first_relevant else 0.0,
        "ndcg@10": dcg / ideal if ideal else 0.0,
    }


def aggregate(rows: Iterable[tuple[Question, dict[str, float]]]) -> dict[str, Any]:
    """Means overall and by kind and by question language (answerable questions only)."""
    groups: dict[str, dict[str, list[dict[str, float]]]] = {
        "overall": defaultdict(list), "by_kind": defaultdict(list), "by_lang": defaultdict(list),
    }  # fmt: skip
    for question, scores in rows:
        groups["overall"]["all"].append(scores)
        groups["by_kind"][question.kind].append(scores)
        groups["by_lang"][question.lang].append(scores)

    def mean(items: list[dict[str, float]]) -> dict[str, float]:
        keys = ["hit@1", "hit@5", "mrr@10", "ndcg@10"]
        return {
            "n": len(items),
            **{k: round(sum(i[k] for i in items) / len(items), 4) for k in keys},
        }

    return {
        "overall": mean(groups["overall"]["all"]) if groups["overall"]["all"] else {"n": 0},
        "by_kind": {k: mean(v) for k, v in sorted(groups["by_kind"].items())},
        "by_lang": {k: mean(v) for k, v in sorted(groups["by_lang"].items())},
    }
