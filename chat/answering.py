"""The answer's lifecycle, in one place for the page, the socket and the API: asking and
retrying (the question budget, saving, starting generation once the transaction commits) and
settling answers whose process died. Generation itself runs in chat.runner (the only place
that starts threads) and chat.agent."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING

from django.db import transaction

from chat import runner, services
from chat.models import Message as MessageModel
from core.ratelimit import rate_limit, user_key

if TYPE_CHECKING:
    from chat.agent import Emit
    from chat.models import Conversation, Message
    from core.types import User


def ask(
    *, user: User, conversation: Conversation, content: str, mode: str = "",
    selections: object = None, excluded: object = None, also: Emit | None = None,
) -> tuple[Message, Message]:  # fmt: skip
    """Spend a question of the user's budget (RateLimited beyond it), save the question and a
    pending answer (ValidationError for an empty, over-long or unsearchable question, or a
    selection of sources that cannot be used; chat.selection), and start the answer when the
    transaction commits; its events go to every open page of the conversation (and to
    `also`)."""
    rate_limit(scope="chat", key=user_key(user))
    question, answer = services.message_ask(
        conversation=conversation, content=content, mode=mode, selections=selections,
        excluded=excluded,
    )  # fmt: skip
    _start_on_commit(answer, also, question_id=question.pk)
    return question, answer


def retry(*, user: User, message: Message, continue_answer: bool = False,
          also: Emit | None = None) -> Message:  # fmt: skip
    """Answer again (or continue a cut-short answer); spends a question like asking."""
    rate_limit(scope="chat", key=user_key(user))
    answer = services.message_retry(message=message, continue_answer=continue_answer)
    _start_on_commit(answer, also)
    return answer


def settle(*, conversation_id: int) -> int:
    """Mark the conversation's abandoned answers interrupted (their process died mid-answer),
    before a page, a poll or the API reads them, so none shows as still being written."""
    return services.message_interrupt_abandoned(conversation_id=conversation_id)


def _start_on_commit(answer: Message, also: Emit | None, question_id: int | None = None) -> None:
    start = partial(runner.start, answer.pk, answer.conversation_id, also, question_id)
    transaction.on_commit(start)


def settled(message: Message) -> Message:
    """`message`, settled first if it is an answer still shown as being written."""

    in_progress = message.role == MessageModel.Role.ASSISTANT and message.status in (
        MessageModel.Status.PENDING,
        MessageModel.Status.STREAMING,
    )
    if in_progress and settle(conversation_id=message.conversation_id):
        message.refresh_from_db()
    return message
