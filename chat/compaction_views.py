"""The Compact button of a conversation page (chat.compaction): summarise the older messages
now, then back to the page with what was done."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from chat import compaction, selectors
from notebook.types import AuthenticatedHttpRequest


@login_required
@require_POST
def conversation_compact(request: AuthenticatedHttpRequest, conversation_id: int) -> HttpResponse:
    conversation = selectors.conversation_get(user=request.user, conversation_id=conversation_id)
    done = compaction.conversation_compact_now(conversation=conversation)
    summarised = conversation.summaries.exists()
    messages.info(request, compaction_message(done, summarised=summarised))
    return redirect("chat:conversation", conversation_id=conversation.pk)


def compaction_message(done: compaction.Compaction, *, summarised: bool) -> str:
    """What the page says after the Compact button (`summarised`: the conversation has
    summaries, from this run or an earlier one)."""
    kept = compaction.KEEP_RECENT
    if done.busy:
        return "This conversation is being compacted already. Reload the page in a moment."
    if not done.compacted:
        if done.uncompacted < kept + compaction.MIN_BATCH and summarised:
            return (
                f"Nothing more to compact: all but the last {kept} messages are summarised already."
            )
        if done.uncompacted < kept + compaction.MIN_BATCH:
            return (
                f"Nothing to compact yet (fewer than {kept + compaction.MIN_BATCH} messages): "
                f"the last {kept} messages always stay as they are."
            )
        return (
            f"Nothing to compact yet: the last {kept} messages, and answers still being "
            "written, stay as they are."
        )
    text = (
        f"Compacted {_count(done.compacted, 'message')} into {_count(done.summaries, 'summary')}."
    )
    if done.remaining:
        verb = "is" if done.remaining == 1 else "are"
        text += f" {_count(done.remaining, 'more message')} {verb} compacted in the background."
    return text


def _count(n: int, noun: str) -> str:
    if n == 1:
        return f"1 {noun}"
    plural = noun[:-1] + "ies" if noun.endswith("y") else noun + "s"
    return f"{n} {plural}"
