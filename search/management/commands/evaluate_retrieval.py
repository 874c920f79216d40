"""`manage.py evaluate_retrieval`: ingest an evaluation set and score retrieval on it.

Every PDF of --pdfs is ingested through the real pipeline into a throwaway user's notebook
(reused on later runs while the files are unchanged); each question of --questions is run in
every mode and through a reference BM25 (the bm25s library over the same chunks), and hit@1,
hit@5, MRR@10 and nDCG@10 are printed overall, by kind and by question language.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bm25s
import Stemmer
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management.base import BaseCommand, CommandError, CommandParser

from attachments import services
from attachments.models import DocumentChunk, NoteAttachment
from core.language import segment_for_search
from core.rerank import reranker_enabled
from core.textutil import cjk_ratio
from notes.models import Note, Notebook
from notes.services import note_create, notebook_create
from search.evaluation import Question, aggregate, load_questions, score_ranking
from search.retrieval import Scope, search

EVAL_USER = "retrieval-eval"
MODES = ("lexical", "vector", "hybrid-rrf", "hybrid-minmax")
# mode name → search() arguments; "+rerank" runs when a RERANKER is configured.
MODE_ARGS: dict[str, dict[str, Any]] = {
    "lexical": {"mode": "lexical", "rerank": False},
    "vector": {"mode": "vector", "rerank": False},
    "hybrid": {"mode": "hybrid", "rerank": False},
    "hybrid-rrf": {"mode": "hybrid", "fusion": "rrf", "rerank": False},
    "hybrid-minmax": {"mode": "hybrid", "fusion": "minmax", "rerank": False},
    "hybrid+rerank": {"mode": "hybrid", "rerank": True},
}


def passwords_from_readme(readme: Path) -> dict[str, str]:
    """`name.pdf`: … password `secret` lines of an eval README."""
    if not readme.exists():
        return {}
    found = re.findall(r"`([^`]+\.pdf)`[^\n]*?password `([^`]+)`", readme.read_text())
    return dict(found)


def eval_workspace(pdf_dir: Path) -> tuple[User, Note]:
    """The evaluation user and the note holding one set's PDFs (one note per directory, so
    different sets never mix; created once, reused)."""

    user, created = User.objects.get_or_create(username=EVAL_USER)
    if created:
        user.set_unusable_password()
        user.save()
    notebook = Notebook.objects.filter(owner=user).first() or notebook_create(
        owner=user, title="Retrieval evaluation"
    )
    key = hashlib.sha256(str(pdf_dir.resolve()).encode()).hexdigest()[:8]
    title = f"Evaluation PDFs: {pdf_dir.resolve().name} ({key})"[:200]
    note = Note.objects.filter(notebook=notebook, title=title).first() or note_create(
        notebook=notebook, author=user, title=title
    )
    return user, note


def ingest_set(
    user: User,
    note: Note,
    files: list[Path],
    passwords: dict[str, str],
    log: Callable[[str], Any] = print,
) -> dict[str, NoteAttachment]:
    """Ingest every file through the real pipeline, reusing earlier ingestions of the same
    bytes; returns file name → attachment (failed ones included: they are part of the set)."""
    out: dict[str, NoteAttachment] = {}
    for path in files:
        data = path.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        attachment = NoteAttachment.objects.filter(note=note, sha256=sha).first()
        if attachment and attachment.status in ("ready", "failed"):
            log(f"reuse  {path.name} ({attachment.status})")
            out[path.name] = attachment
            continue
        if attachment is None:
            try:
                attachment = services.attachment_upload(
                    user=user, note=note, uploaded=SimpleUploadedFile(path.name, data)
                )
            except Exception as exc:  # a refused file is part of the result
                log(f"refused {path.name}: {exc}")
                continue
        if attachment.status == "needs_password" and path.name in passwords:
            services.attachment_submit_password(
                attachment=attachment, password=passwords[path.name]
            )
        elif attachment.status not in ("pending", "needs_password"):
            services.attachment_reprocess(attachment=attachment)
        started = time.perf_counter()
        services.attachment_ingest(attachment_id=attachment.pk)
        attachment.refresh_from_db()
        while attachment.is_active:  # a running worker may have claimed it first
            time.sleep(1)
            attachment.refresh_from_db()
        took = time.perf_counter() - started
        log(f"ingest {path.name}: {attachment.status} in {took:.1f}s")
        out[path.name] = attachment
    return out


def add_set_arguments(parser: CommandParser) -> None:
    """--pdfs, --questions, --json and --password, shared with evaluate_answers."""
    parser.add_argument("--pdfs", type=Path, required=True)
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--json", type=Path, help="Also write the figures here.")
    parser.add_argument(
        "--password", action="append", default=[], metavar="FILE=PASSWORD",
        help="Password of an encrypted PDF (default: read from the set's README.md).",
    )  # fmt: skip


def prepare_set(
    options: dict[str, Any], log: Callable[[str], Any]
) -> tuple[User, Note, dict[str, NoteAttachment]]:
    """The evaluation workspace with every PDF of --pdfs ingested (or reused)."""
    pdf_dir: Path = options["pdfs"]
    if not pdf_dir.is_dir():
        raise CommandError(f"{pdf_dir} is not a directory")
    passwords = passwords_from_readme(pdf_dir.parent / "README.md")
    passwords.update(dict(p.split("=", 1) for p in options["password"]))
    user, note = eval_workspace(pdf_dir)
    attachments = ingest_set(user, note, sorted(pdf_dir.glob("*.pdf")), passwords, log=log)
    return user, note, attachments


class Command(BaseCommand):
    help = "Score retrieval (lexical, vector, hybrid, reference BM25) on an evaluation set."

    def add_arguments(self, parser: CommandParser) -> None:
        add_set_arguments(parser)
        parser.add_argument("--modes", default=",".join(MODES))

    def handle(self, *args: Any, **options: Any) -> None:
        questions = load_questions(options["questions"])
        modes = [m for m in options["modes"].split(",") if m]
        if unknown := [m for m in modes if m not in MODE_ARGS]:
            raise CommandError(f"Unknown mode(s) {unknown}; choose from {', '.join(MODE_ARGS)}")
        if reranker_enabled() and "hybrid+rerank" not in modes:
            modes.append("hybrid+rerank")

        user, note, attachments = prepare_set(options, self.stderr.write)
        ready = {name: a for name, a in attachments.items() if a.status == "ready"}
        answerable = [q for q in questions if q.answerable]
        unanswerable = [q for q in questions if not q.answerable]
        scope = Scope(note_id=note.pk, include_notes=False)  # the gold set is about the PDFs

        results: dict[str, Any] = {"modes": {}, "unanswerable": {}, "files": {}}
        for name, att in attachments.items():
            results["files"][name] = {"status": att.status, "error": att.error}
        for mode in modes:
            rows, tops = [], []
            started = time.perf_counter()
            for q in answerable + unanswerable:
                found = search(
                    user=user, query=q.question, scope=scope, limit=10, **MODE_ARGS[mode]
                )
                ranking = [
                    (h.chunk.attachment.original_name, h.chunk.page_number)
                    for h in found.hits
                    if h.chunk
                ]
                top = found.hits[0] if found.hits else None
                top_score = (
                    (
                        top.lexical
                        if mode == "lexical"
                        else top.vector
                        if mode == "vector"
                        else top.fused
                    )
                    if top
                    else 0.0
                )
                if q.answerable:
                    rows.append((q, score_ranking(q, ranking)))
                else:
                    tops.append(top_score or 0.0)
            results["modes"][mode] = aggregate(rows)
            others = [(q, r) for q, r in rows if q.kind != "crosslingual"]
            results["modes"][mode]["non_crosslingual"] = aggregate(others)["overall"]
            results["modes"][mode]["seconds_per_query"] = round(
                (time.perf_counter() - started) / max(1, len(questions)), 4
            )
            results["unanswerable"][mode] = _distribution(tops)
        reference = self._reference(ready, answerable)
        results["modes"]["bm25s"] = aggregate(reference)
        results["modes"]["bm25s"]["non_crosslingual"] = aggregate(
            [(q, r) for q, r in reference if q.kind != "crosslingual"]
        )["overall"]
        self._print(results, answerable)
        if options["json"]:
            options["json"].write_text(json.dumps(results, indent=2, ensure_ascii=False))
            self.stdout.write(f"Wrote {options['json']}")

    def _reference(
        self, ready: dict[str, NoteAttachment], questions: list[Question]
    ) -> list[tuple[Question, dict[str, float]]]:
        chunks = list(
            DocumentChunk.objects.filter(attachment__in=ready.values())
            .select_related("attachment")
            .order_by("pk")
        )
        stemmer = Stemmer.Stemmer("english")

        def prepare(text: str) -> str:
            return segment_for_search(text, "zh") if cjk_ratio(text) > 0.05 else text

        corpus = bm25s.tokenize(
            [prepare(c.content) for c in chunks],
            stopwords="en",
            stemmer=stemmer,
            show_progress=False,
        )
        retriever = bm25s.BM25()
        retriever.index(corpus, show_progress=False)
        rows = []
        for q in questions:
            tokens = bm25s.tokenize(
                [prepare(q.question)], stopwords="en", stemmer=stemmer, show_progress=False
            )
            if not tokens.vocab:
                rows.append((q, score_ranking(q, [])))
                continue
            ids, _ = retriever.retrieve(tokens, k=min(10, len(chunks)), show_progress=False)
            ranking = [(chunks[i].attachment.original_name, chunks[i].page_number) for i in ids[0]]
            rows.append((q, score_ranking(q, ranking)))
        return rows

    def _print(self, results: dict[str, Any], answerable: list[Question]) -> None:
        w = self.stdout.write
        w(f"\n{len(answerable)} answerable questions; relevant = same file and a gold page\n")
        w(f"{'mode':<15}{'n':>4}{'hit@1':>8}{'hit@5':>8}{'MRR@10':>8}{'nDCG@10':>9}")
        for label, part in (
            ("", "overall"),
            ("\nWithout crosslingual questions:", "non_crosslingual"),
        ):
            if label:
                w(label)
            for mode, figures in results["modes"].items():
                o = figures[part]
                if not o.get("n"):
                    continue
                w(
                    f"{mode:<15}{o['n']:>4}{o['hit@1']:>8.3f}{o['hit@5']:>8.3f}"
                    f"{o['mrr@10']:>8.3f}{o['ndcg@10']:>9.3f}"
                )
        for group in ("by_kind", "by_lang"):
            w(f"\nnDCG@10 {group.replace('_', ' ')}:")
            keys = sorted({k for f in results["modes"].values() for k in f[group]})
            w(f"{'':<17}" + "".join(f"{m[:14]:>15}" for m in results["modes"]))
            for key in keys:
                cells = "".join(
                    f"{results['modes'][m][group].get(key, {}).get('ndcg@10', float('nan')):>15.3f}"
                    for m in results["modes"]
                )
                n = next(f[group][key]["n"] for f in results["modes"].values() if key in f[group])
                w(f"{key + f' ({n})':<17}{cells}")
        w("\nTop score on unanswerable questions (for abstention later):")
        for mode, dist in results["unanswerable"].items():
            w(f"  {mode:<15} {dist}")


def _distribution(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "n": len(values),
        "min": round(min(values), 4),
        "median": round(statistics.median(values), 4),
        "max": round(max(values), 4),
    }
