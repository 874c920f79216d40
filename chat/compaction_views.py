"""The Compact button of a conversation page (chat.compaction): summarise the older messages
now, then back to the page with what was done."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from chat import compaction, selectors
from core.types import AuthenticatedHttpRequest


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
        return _("This conversation is being compacted already. Reload the page in a moment.")
    if not done.compacted:
        if done.uncompacted < kept + compaction.MIN_BATCH and summarised:
            return _(
                "Nothing more to compact: all but the last %(kept)d messages are summarised "
                "already."
            ) % {"kept": kept}
        if done.uncompacted < kept + compaction.MIN_BATCH:
            return _(
                "Nothing to compact yet (fewer than %(least)d messages): the last %(kept)d "
                "messages always stay as they are."
            ) % {"least": kept + compaction.MIN_BATCH, "kept": kept}
        return _(
            "Nothing to compact yet: the last %(kept)d messages, and answers still being "
            "written, stay as they are."
        ) % {"kept": kept}
    messages_part = ngettext(
        "Compacted %(count)d message", "Compacted %(count)d messages", done.compacted
    ) % {"count": done.compacted}
    text = (
        # Translators: %(compacted)s is the start of the sentence, "Compacted 20 messages".
        ngettext(
            "%(compacted)s into %(count)d summary.",
            "%(compacted)s into %(count)d summaries.",
            done.summaries,
        )
        % {"compacted": messages_part, "count": done.summaries}
    )
    if done.remaining:
        text += " " + ngettext(
            "%(count)d more message is compacted in the background.",
            "%(count)d more messages are compacted in the background.",
            done.remaining,
        ) % {"count": done.remaining}
    return text
