from __future__ import annotations

import pytest

from search.evaluation import Question, aggregate, score_ranking
from search.management.commands.evaluate_retrieval import passwords_from_readme
from tests.fixtures.documents import EVAL_PDFS


def q(pages: list[int], kind: str = "factoid", lang: str = "en") -> Question:
    return Question("x", "?", lang, "a.pdf", pages, kind)


def test_metrics_for_a_perfect_and_a_late_hit():
    perfect = score_ranking(q([3]), [("a.pdf", 3), ("b.pdf", 3)])
    assert perfect == {"hit@1": 1.0, "hit@5": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}
    late = score_ranking(q([3]), [("b.pdf", 3)] * 5 + [("a.pdf", 3)])
    assert late["hit@1"] == 0.0
    assert late["hit@5"] == 0.0
    assert late["mrr@10"] == pytest.approx(1 / 6)


def test_each_gold_page_counts_once_so_ndcg_stays_within_one():
    scores = score_ranking(q([3, 4]), [("a.pdf", 3), ("a.pdf", 3), ("a.pdf", 4)])
    assert 0 < scores["ndcg@10"] < 1
    assert score_ranking(q([3, 4]), [("a.pdf", 4), ("a.pdf", 3)])["ndcg@10"] == 1.0


def test_aggregate_groups_by_kind_and_language():
    ones = {"hit@1": 1.0, "hit@5": 1.0, "mrr@10": 1.0, "ndcg@10": 1.0}
    zeros = dict.fromkeys(ones, 0.0)
    rows = [(q([1], "ocr", "en"), ones), (q([1], "factoid", "de"), zeros)]
    result = aggregate(rows)
    assert result["overall"]["ndcg@10"] == 0.5
    assert result["by_kind"]["ocr"]["ndcg@10"] == 1.0
    assert result["by_lang"]["de"]["n"] == 1


@pytest.mark.eval
def test_passwords_are_read_from_the_eval_readme():
    passwords = passwords_from_readme(EVAL_PDFS.parent / "README.md")
    assert passwords == {"url-password-opensesame.pdf": "opensesame"}


@pytest.mark.eval
@pytest.mark.slow
@pytest.mark.django_db
def test_evaluate_retrieval_runs_on_a_small_set_and_reuses_its_ingestion(tmp_path, capsys):
    import json
    import shutil

    from django.core.management import call_command

    pdfs = tmp_path / "pdfs"
    pdfs.mkdir()
    shutil.copy(EVAL_PDFS / "url.pdf", pdfs / "url.pdf")
    lines = (EVAL_PDFS.parent / "questions.jsonl").read_text().splitlines()
    questions = tmp_path / "questions.jsonl"
    questions.write_text("\n".join(line for line in lines if '"url.pdf"' in line))
    out = tmp_path / "figures.json"
    call_command("evaluate_retrieval", "--pdfs", pdfs, "--questions", questions, "--json", out)
    figures = json.loads(out.read_text())
    assert set(figures["modes"]) == {"lexical", "vector", "hybrid-rrf", "hybrid-minmax", "bm25s"}
    for mode in figures["modes"].values():
        assert set(mode) >= {"overall", "non_crosslingual", "by_kind", "by_lang"}
        assert 0 <= mode["overall"]["ndcg@10"] <= 1
    assert figures["modes"]["lexical"]["overall"]["hit@5"] == 1.0  # two easy questions
    assert "nDCG@10" in capsys.readouterr().out
    again = ["--pdfs", pdfs, "--questions", questions, "--modes", "lexical"]
    call_command("evaluate_retrieval", *again)
    assert "reuse  url.pdf (ready)" in capsys.readouterr().err
