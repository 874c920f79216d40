"""Save to note: an answer, with its citations as links back to the file and page, becomes a
new note of the conversation's notebook or is appended to one of its notes.

The answer is stored as Markdown the note renders like any other (sanitized); its quotes and
file names are escaped so a document's text cannot become markup or a link in the note. A
note shows every link, so the answer keeps its own link policy on the way (inert_links): a
URL the answer showed as text (grounding.citations.allowed_links did not vouch for it) is saved as
code, never as a link, and the only other links are ours, back to each cited file or note.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.utils.translation import gettext as _

from chat.claims import unbacked_spans
from chat.models import Message
from chat.rendering import page_label, shown_links, sources
from core.markdown import escape_markdown, inert_links
from core.textutil import clip
from notes.models import Note, Role
from notes.selectors import notebook_check
from notes.services import note_create, note_update

if TYPE_CHECKING:
    from core.types import User

TITLE_CHARS = 120


def _escape(text: str) -> str:
    """Text we did not write, on one line, as Markdown that shows it as it is."""
    return escape_markdown(" ".join(text.split()))


def _flagged(answer: Message) -> str:
    """The answer's Markdown with each sentence no source backs followed by a mark saying so,
    as the page shows it (chat.claims)."""
    content, out, pos = answer.content, [], 0
    flag = " *(" + _("not found in the sources") + ")*"
    for _start, end in unbacked_spans(answer.metadata, content):
        out += [content[pos:end], flag]
        pos = end
    out.append(content[pos:])
    return "".join(out)


def answer_markdown(answer: Message) -> str:
    """The question as a heading, the answer as written (but for the URLs it did not show as
    links: code), then its verified sources: one list item per citation with a link to the
    PDF at its page (or to the note) and the quote."""
    question = answer.reply_to.content if answer.reply_to_id else ""  # type: ignore[union-attr]
    lines = []
    if question.strip():
        lines += [f"## {_escape(question)}", ""]
    lines += [inert_links(_flagged(answer).strip(), links=shown_links(answer)), ""]
    cited = sources(answer)
    if cited:
        lines += ["**" + _("Sources") + "**", ""]
        for source in cited:
            where = page_label(source.label, source.page, source.where)
            link = f"[{_escape(where)}](<{source.open_url}>)"
            quote = f" — “{_escape(source.quote)}”" if source.quote else ""
            lines.append(f"{source.n}. {link}{quote}")
        lines.append("")
    return "\n".join(lines).strip() + "\n"


def answer_save_to_note(*, user: User, answer: Message, note: Note | None = None) -> Note:
    """Write `answer` into `note` (appended after a rule) or, without one, into a new note of
    the conversation's notebook titled after the question. ValidationError (nothing written)
    for an answer that is not finished, a note elsewhere or in the trash, or a note that would
    grow past its size limit."""
    if answer.role != Message.Role.ASSISTANT or answer.status != Message.Status.COMPLETE:
        raise ValidationError(
            _("Only a finished answer can be saved to a note."), code="unfinished"
        )
    if not answer.content.strip():
        raise ValidationError(_("This answer is empty: there is nothing to save."), code="empty")
    if (answer.metadata or {}).get("grounding") == "unsourced":
        raise ValidationError(
            _("Nothing in this answer is backed by your sources, so it is not saved to a note."),
            code="unsourced",
        )
    conversation = answer.conversation
    # A viewer of a shared notebook asks in their own conversations but writes no notes there.
    notebook_check(user=user, notebook=conversation.notebook, role=Role.EDITOR)
    body = answer_markdown(answer)
    if note is None:
        question = answer.reply_to.content if answer.reply_to_id else ""  # type: ignore[union-attr]
        title = clip(question, TITLE_CHARS) or _("Answer from “%(title)s”") % {
            "title": conversation.title
        }
        return note_create(notebook=conversation.notebook, author=user, title=title, body=body)
    if note.notebook_id != conversation.notebook_id:
        raise ValidationError(_("That note is in another notebook."), code="elsewhere")
    if note.is_trashed:
        raise ValidationError(_("That note is in the trash. Restore it first."), code="trashed")
    joined = f"{note.body.rstrip()}\n\n---\n\n{body}" if note.body.strip() else body
    return note_update(note=note, body=joined, editor=user)
