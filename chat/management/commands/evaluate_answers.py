"""`manage.py evaluate_answers`: ask every question of an evaluation set through the real
agent path and score the answers.

Ingestion is the same as `evaluate_retrieval` (one note per PDF directory, reused while the
files are unchanged). Each question is asked in a fresh conversation about that note, through
chat.services.message_ask and chat.agent.generate, with the configured answerer (extractive
unless CHAT_MODEL is set). Reported overall, by kind and by question language:

- hit@5: answers whose search (the first five document passages retrieved) found the file
  on one of its gold pages; follow-up: questions read as follow-ups (chat.reformulation);
- keywords: answers containing every `answer_keywords` entry (case-insensitive), read as
  the page shows them (Markdown rendered to text: "\\documentclass" is a keyword; until
  session 15 backslashes were dropped from answers but not from keywords, so no keyword with
  one could ever be found);
- cites gold page: answers with a shown citation of the question's file on one of its pages;
- gold shown: answers that cite a gold page or list one among the further passages shown under
  the answer (*Also in your sources*, metadata["related"]);
- 1 passage: of the answers that cite anything, those whose text quotes one place only (one
  file's page, or one note): an offline answer is one passage of one page;
- verified: shown citations / citations the answer made (shown + refused);
- abstained: share of unanswerable questions where the answer said it could not answer
  (and, for answerable ones, how often it wrongly abstained);
- unsourced: complete answers with no verified citation that are not abstentions (the page
  marks them "not backed by your sources"); cited: answers shown with a verified citation;
  errors: answers that failed (not scored for time: the figures are over the answers that
  completed);
- backed: of the sentences the chat model's answers show (chat.claims), the share backed by
  the passage they cite; high+unbacked: "high" answers with a sentence not backed (never);
- time to first token and to done: median and p95.

`--keep FILE` writes every answer's text, citations, tool calls and grounding as JSON lines,
to look at what a model did. `--conversations FILE` (../shared/eval/conversations.jsonl) asks
each conversation's turns in order in one chat, so follow-ups see the history, and scores
every turn the same way (reported by turn kind: first, followup-…); `--standalone` asks each
follow-up as its self-contained rewrite instead (the upper bound for reformulation). Compare
with CHAT_REFORMULATION=off (the literal question) and SEARCH_ANCHOR_BOOST=0 (no anchoring).
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat import services
from chat.agent import generate, get_answerer
from chat.models import Message
from core.markdown import plain_text
from search.evaluation import Question, load_questions
from search.management.commands.evaluate_retrieval import add_set_arguments, prepare_set


def _keywords(path: Path) -> dict[str, list[str]]:
    rows = (json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line)
    return {row["id"]: list(row.get("answer_keywords", [])) for row in rows}


def _conversations(
    path: Path, *, standalone: bool = False
) -> tuple[list[list[Question]], dict[str, list[str]]]:
    """Each conversation's turns as questions (ids `<conversation>-<turn>`), and their
    answer keywords; with `standalone`, a follow-up is asked as its self-contained rewrite
    (the upper bound for reformulation)."""
    chats: list[list[Question]] = []
    keywords: dict[str, list[str]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        turns = []
        for i, turn in enumerate(row["turns"], start=1):
            q = Question(
                id=f"{row['id']}-{i}",
                question=turn.get("standalone", turn["question"])
                if standalone
                else turn["question"],
                lang=row.get("lang", ""),
                file=turn.get("file", ""),
                pages=list(turn.get("pages", [])),
                kind=turn.get("kind", ""),
            )
            keywords[q.id] = list(turn.get("answer_keywords", []))
            turns.append(q)
        chats.append(turns)
    return chats, keywords


def _kept(q: Any, answer: Message) -> dict[str, Any]:
    return {
        "id": q.id,
        "question": q.question,
        "status": answer.status,
        "error": answer.error,
        "answer": answer.content,
        "grounding": answer.metadata.get("grounding", ""),
        "confidence": answer.confidence,
        "claims": answer.metadata.get("claims"),
        "citations": answer.citations,
        "searched": answer.reply_to.search_query if answer.reply_to else "",
        "retrieved": [
            {k: r.get(k) for k in ("file", "page", "score")}
            for r in answer.retrieved
            if r.get("kind") == "document"
        ],
        "tool_calls": [
            {k: call.get(k) for k in ("name", "arguments", "summary", "results")}
            for call in answer.tool_calls
        ],
        "usage": answer.usage,
        "timings": answer.timings,
    }


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    answerable = [r for r in rows if r["answerable"]]
    unanswerable = [r for r in rows if not r["answerable"]]
    made = sum(r["shown"] + r["refused"] for r in rows)

    def share(items: list[dict[str, Any]], key: str) -> float | None:
        return round(sum(bool(r[key]) for r in items) / len(items), 4) if items else None

    completed = [r for r in rows if r["status"] == Message.Status.COMPLETE]
    quoting = [r for r in rows if r.get("single_passage") is not None]
    judged = sum(r["sentences"] for r in completed)
    backed = sum(r["sentences"] - r["unbacked"] for r in completed)
    firsts = [r["first_token"] for r in completed]
    totals = [r["total"] for r in completed]
    return {
        "n": len(rows),
        "errors": len(rows) - len(completed),
        "unsourced": sum(r["grounding"] == "unsourced" for r in completed),
        "cited": sum(r["grounding"] == "cited" for r in completed),
        "backed_sentences": round(backed / judged, 4) if judged else None,
        "high_unbacked": sum(r["confidence"] == "high" and r["unbacked"] > 0 for r in completed),
        "hit_at_5": share(answerable, "hit5"),
        "read_as_follow_up": share(rows, "follow_up"),
        "keywords": share(answerable, "keywords"),
        "cites_gold_page": share(answerable, "cites_gold"),
        "shows_gold_page": share(answerable, "shows_gold"),
        "single_passage": share(quoting, "single_passage"),
        "verified_citations": round(sum(r["shown"] for r in rows) / made, 4) if made else None,
        "abstained_unanswerable": share(unanswerable, "abstained"),
        "abstained_answerable": share(answerable, "abstained"),
        "first_token_median_s": round(statistics.median(firsts), 3) if firsts else None,
        "first_token_p95_s": round(_percentile(firsts, 0.95), 3),
        "done_median_s": round(statistics.median(totals), 3) if totals else None,
        "done_p95_s": round(_percentile(totals, 0.95), 3),
    }


class Command(BaseCommand):
    help = "Ask every question of an evaluation set through the agent and score the answers."

    def add_arguments(self, parser: CommandParser) -> None:
        add_set_arguments(parser)
        parser.add_argument("--limit", type=int, default=0, help="Only the first N questions.")
        parser.add_argument("--show", action="store_true", help="Print every answer.")
        parser.add_argument(
            "--keep", type=Path, help="Write each answer, its citations and tool calls (JSONL)."
        )
        parser.add_argument(
            "--conversations", type=Path,
            help="Also ask these multi-turn conversations (JSONL), each turn in one chat.",
        )  # fmt: skip
        parser.add_argument(
            "--standalone", action="store_true",
            help="Ask every follow-up turn as its `standalone` rewrite (an upper bound).",
        )  # fmt: skip

    def handle(self, *args: Any, **options: Any) -> None:
        questions = load_questions(options["questions"])
        if options["limit"]:
            questions = questions[: options["limit"]]
        keywords = _keywords(options["questions"])
        chats: list[list[Question]] = [[q] for q in questions]
        if options["conversations"]:
            conversations, turn_keywords = _conversations(
                options["conversations"], standalone=options["standalone"]
            )
            chats += conversations
            keywords.update(turn_keywords)
        user, note, _ = prepare_set(options, self.stderr.write)
        answerer = get_answerer()
        self.stderr.write(f"answerer: {answerer.name}")

        rows: list[dict[str, Any]] = []
        kept = options["keep"].open("w", encoding="utf-8") if options["keep"] else None
        for turns in chats:  # a question alone, or a conversation's turns in order
            conversation = services.conversation_create(
                owner=user, notebook=note.notebook, note=note, title=f"eval {turns[0].id}"
            )
            for q in turns:
                _, pending = services.message_ask(conversation=conversation, content=q.question)
                answer = generate(pending.pk, lambda event, data: None, answerer=answerer)
                if answer is None:
                    raise CommandError(f"{q.id}: the answer was already being generated")
                rows.append(self._score(q, answer, keywords.get(q.id, [])))
                if options["show"]:
                    self.stdout.write(
                        f"\n[{q.id}] {q.question}\n{answer.content}\n{answer.citations}"
                    )
                if kept is not None:
                    kept.write(json.dumps(_kept(q, answer), ensure_ascii=False) + "\n")
            conversation.delete()
        if kept is not None:
            kept.close()
            self.stdout.write(f"Kept the answers in {options['keep']}")

        results: dict[str, Any] = {
            "answerer": answerer.name,
            "overall": summarise(rows),
            "by_kind": {},
            "by_lang": {},
            "questions": rows,
        }
        for group, key in (("by_kind", "kind"), ("by_lang", "lang")):
            buckets: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for row in rows:
                buckets[row[key]].append(row)
            results[group] = {k: summarise(v) for k, v in sorted(buckets.items())}
        self._print(results)
        if options["json"]:
            options["json"].write_text(json.dumps(results, indent=2, ensure_ascii=False))
            self.stdout.write(f"Wrote {options['json']}")

    @staticmethod
    def _score(q: Any, answer: Message, keywords: list[str]) -> dict[str, Any]:
        # The answer as its reader sees it: Markdown escapes undone, "\documentclass" kept.
        text = plain_text(answer.content).lower()
        cites_gold = any(
            c.get("file") == q.file and c.get("page") in q.pages for c in answer.citations
        )
        found = [r for r in answer.retrieved if r.get("kind") == "document"][:5]
        related = (answer.metadata or {}).get("related") or []
        shows_gold = cites_gold or any(
            r.get("file") == q.file and r.get("page") in q.pages for r in related
        )
        # The places the answer's text quotes: one (a file's page, or a note) for a passage.
        places = {(c.get("kind"), c.get("attachment_id"), c.get("page"), c.get("note_id"))
                  for c in answer.citations}  # fmt: skip
        asked = answer.reply_to
        claims = answer.metadata.get("claims") or {}
        return {
            "id": q.id,
            "kind": q.kind,
            "hit5": any(r.get("file") == q.file and r.get("page") in q.pages for r in found),
            "follow_up": bool(asked and asked.is_follow_up),
            "searched": asked.search_query if asked else "",
            "lang": q.lang,
            "answerable": q.answerable,
            "status": answer.status,
            "keywords": bool(keywords) and all(k.lower() in text for k in keywords),
            "cites_gold": cites_gold,
            "shows_gold": shows_gold,
            "single_passage": len(places) == 1 if places else None,
            "shown": len(answer.citations),
            "refused": int(answer.metadata.get("unverified_citations", 0)),
            "abstained": bool(answer.metadata.get("abstained")),
            "grounding": answer.metadata.get("grounding", ""),
            "confidence": answer.confidence,
            # The chat model's sentences shown, and those no source backs (chat.claims).
            "sentences": int(claims.get("sentences") or 0),
            "unbacked": int(claims.get("sentences") or 0) - int(claims.get("backed") or 0),
            "first_token": float(answer.timings.get("first_token", 0.0)),
            "total": float(answer.timings.get("total", 0.0)),
        }

    def _print(self, results: dict[str, Any]) -> None:
        w = self.stdout.write
        cols = ["n", "errors", "unsourced", "cited", "backed_sentences", "high_unbacked",
                "hit_at_5", "read_as_follow_up", "keywords",
                "cites_gold_page", "shows_gold_page", "single_passage", "verified_citations",
                "abstained_unanswerable", "abstained_answerable", "first_token_median_s",
                "first_token_p95_s", "done_median_s", "done_p95_s"]  # fmt: skip
        heads = ["n", "errors", "unsourced", "cited", "backed", "high+unb.", "hit@5",
                 "follow-up", "keywords", "gold page", "gold shown", "1 passage",
                 "verified", "abst.unans",
                 "abst.ans", "ttft p50", "ttft p95", "done p50", "done p95"]  # fmt: skip
        w(f"\nanswerer: {results['answerer']}")
        w(f"{'':<18}" + "".join(f"{h:>11}" for h in heads))

        def line(label: str, figures: dict[str, Any]) -> None:
            cells = "".join(
                f"{'-':>11}" if figures[c] is None else f"{figures[c]:>11}" for c in cols
            )
            w(f"{label:<18}{cells}")

        line("overall", results["overall"])
        for group in ("by_kind", "by_lang"):
            w(group.replace("_", " ") + ":")
            for key, figures in results[group].items():
                line(f"  {key}", figures)
