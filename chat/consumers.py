"""The conversation page's WebSocket, `/ws/chat/<conversation_id>/` (htmx's ws extension).

The page sends its ask form (and retry buttons) as JSON; we save through chat.services, start
generation with chat.runner (a background thread that does not depend on this socket) and
answer with HTML partials that htmx swaps out of band: the question and an answer placeholder
at once, the tool activity as a status line, tokens appended as they come, and on `done` (or
`error`) the whole message rendered again from the database, chips and all.

Every socket of a conversation joins its group, so a second tab, or a tab reloaded while an
answer is being written, keeps receiving the answer's events.

The partials come in the page's language: the one LocaleMiddleware picks for the page's own
requests (the language cookie of Settings → Language, else the browser's Accept-Language),
read from the handshake at connect and active whenever this socket renders or refuses.

A socket lives only as long as its session: every frame from the page is refused unless the
session still logs the user in, and every socket joins its user's group, through which a logout
or a password change elsewhere makes it check at once; either way it closes with 4401.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, ParamSpec, TypedDict, TypeVar

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils import translation
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _

from chat import answering, runner, selection, selectors
from chat.forms import AskForm
from chat.models import Conversation, Message
from chat.rendering import IN_PROGRESS, activity, present
from core import metrics
from core.params import parse_id
from core.ratelimit import RateLimited
from core.websocket import (
    CLOSE_SESSION_ENDED,
    AccessChanged,
    UserClose,
    session_is_current,
    user_group_name,
)

if TYPE_CHECKING:
    from core.types import User

P = ParamSpec("P")
R = TypeVar("R")

# What a socket does in the database (a question's save, a message's rendering) runs in these
# threads, not in asgiref's one thread-sensitive thread per process, for which every socket of
# the process would queue: 20 people asking at once, each question's save waiting behind the
# other sockets' renders. Each call is a whole unit of work on its own connection; one
# socket's frames and events are still handled one after another. One pool per process: a
# forked child (a test's server) would inherit threads that do not exist in it.
SOCKET_THREADS = 8
_socket_work: tuple[int, ThreadPoolExecutor] | None = None


def socket_work() -> ThreadPoolExecutor:
    global _socket_work
    if _socket_work is None or _socket_work[0] != os.getpid():
        pool = ThreadPoolExecutor(max_workers=SOCKET_THREADS, thread_name_prefix="socket")
        _socket_work = (os.getpid(), pool)
    return _socket_work[1]


def in_socket_thread(function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
    """`function` to await from a consumer: in one of this process's socket threads."""
    return database_sync_to_async(function, thread_sensitive=False, executor=socket_work())  # type: ignore[no-any-return]


class ShowMessages(TypedDict):
    """Tell every socket of the conversation to show a new question and its (empty) answer,
    or, without a question, to show a retried answer as empty again."""

    type: Literal["chat.show"]
    question_id: int | None
    answer_id: int


# The close code of a socket whose conversation the user may no longer see (like HTTP's 404).
CLOSE_ACCESS_ENDED = 4404


class Refused(Exception):
    """The user may not see this conversation (any more)."""


@dataclass
class Asked:
    question: Message | None = None
    answer: Message | None = None
    form_html: str = ""  # the ask form: emptied, or with the error and the question kept


def _csrf_token(scope: dict[str, Any]) -> str:
    """A form token for the partials we render, from the socket's CSRF cookie, so their
    forms also work as plain posts."""
    cookie = scope.get("cookies", {}).get(settings.CSRF_COOKIE_NAME)
    if not cookie:
        return ""
    request = HttpRequest()
    request.META["CSRF_COOKIE"] = cookie
    try:
        return get_token(request)
    except ValueError:  # a malformed cookie: the form posts would be refused anyway
        return ""


def _language(scope: dict[str, Any]) -> str:
    """The language of the page this socket belongs to, chosen as LocaleMiddleware chose it
    for the page: the language cookie, else the handshake's Accept-Language, else the
    default."""
    request = HttpRequest()
    request.COOKIES = dict(scope.get("cookies", {}))
    for name, value in scope.get("headers", []):
        if name == b"accept-language":
            request.META["HTTP_ACCEPT_LANGUAGE"] = value.decode("latin-1")
    return translation.get_language_from_request(request)


def _in_language(language: str, function: Callable[P, R]) -> Callable[P, R]:
    """`function` run with `language` active (for database_sync_to_async: each call may run
    in another thread)."""

    @functools.wraps(function)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with translation.override(language):
            return function(*args, **kwargs)

    return run


def _conversation(user: User, conversation_id: int) -> Conversation:
    try:
        return selectors.conversation_get(user=user, conversation_id=conversation_id)
    except Http404 as exc:
        raise Refused from exc


def _form_html(
    conversation: Conversation,
    form: AskForm,
    csrf_token: str,
    chosen: tuple[object, object] = ("", ""),
) -> str:
    """The ask form swapped in after a question, keeping the chips just sent (`chosen`: the
    selections and exclusions, as sent; chat.selection)."""
    context = {
        "conversation": conversation,
        "form": form,
        "oob": True,
        "csrf_token": csrf_token,
        "selection_state": selection.form_state(conversation, *chosen),
    }
    return render_to_string("chat/_ask_form.html", context).strip()


def _message_html(message: Message, csrf_token: str, *, oob: bool = True) -> SafeString:
    context = {"item": present(message), "oob": oob, "csrf_token": csrf_token}
    return SafeString(render_to_string("chat/_message.html", context).strip())


def _fresh(message: Message) -> Message:
    """A new or retried answer as it starts: empty. Its events follow through the group in
    order; what the database holds by now was already sent (or is queued) as tokens."""
    message.status, message.content, message.tool_calls = Message.Status.PENDING, "", []
    return message


def in_progress_answers(user: User, conversation_id: int) -> list[int]:
    """Answers of the conversation still being written (Refused if it is not the user's)."""
    _conversation(user, conversation_id)
    answering.settle(conversation_id=conversation_id)
    answers = selectors.message_list(user=user, conversation_id=conversation_id).filter(
        role=Message.Role.ASSISTANT, status__in=IN_PROGRESS
    )
    return list(answers.values_list("pk", flat=True))


def ask(
    user: User, conversation_id: int, content: str, csrf_token: str, mode: str = "",
    chosen: tuple[object, object] = ("", ""),
) -> Asked:  # fmt: skip
    """Ask over the socket; `chosen` is the (selections, excluded) the form sent."""
    conversation = _conversation(user, conversation_id)
    try:
        question, answer = answering.ask(
            user=user, conversation=conversation, content=content, mode=mode,
            selections=chosen[0], excluded=chosen[1],
        )  # fmt: skip
    except (ValidationError, RateLimited) as exc:
        form = AskForm({"content": content, "mode": mode or conversation.mode})
        form.is_valid()
        # A dict of field errors lands on its fields; a refusal shows above the kept question.
        form.add_error(None, exc.message if isinstance(exc, RateLimited) else exc)
        return Asked(form_html=_form_html(conversation, form, csrf_token, chosen))
    fresh = AskForm(initial={"mode": question.mode or conversation.mode})
    return Asked(question, answer, _form_html(conversation, fresh, csrf_token, chosen))


def retry(
    user: User, conversation_id: int, message_id: int, csrf_token: str, *, go_on: bool = False
) -> Asked:
    """The answer made pending again (continued from its cut with `go_on`); no answer if it
    cannot be retried (any more), and the ask form with the refusal if the user is over their
    question budget (which retries spend like questions)."""
    conversation = _conversation(user, conversation_id)
    try:
        message = selectors.message_get(user=user, message_id=message_id)
    except Http404:
        return Asked()
    if message.conversation_id != conversation_id:
        return Asked()
    try:
        return Asked(answer=answering.retry(user=user, message=message, continue_answer=go_on))
    except RateLimited as exc:
        refusal = AskForm.refusing(exc.message)
        return Asked(form_html=_form_html(conversation, refusal, csrf_token))
    except ValidationError:
        return Asked()  # already retried (another tab): that retry's events are on their way


def show_html(user: User, event: ShowMessages, csrf_token: str) -> str:
    """The question and placeholder to append, or the retried answer to replace."""
    answer = _fresh(selectors.message_get(user=user, message_id=event["answer_id"]))
    if event["question_id"] is None:
        return _message_html(answer, csrf_token)
    question = selectors.message_get(user=user, message_id=event["question_id"])
    html = _message_html(question, csrf_token, oob=False)
    html += _message_html(answer, csrf_token, oob=False)
    # The first question names the conversation: its title is replaced inside whatever holds
    # it (the conversation page's <h1>, the workspace's conversation picker).
    return format_html(
        '<div id="message-list" hx-swap-oob="beforeend">{}</div>'
        '<h1 id="conversation-title" hx-swap-oob="innerHTML">{}</h1>',
        html,
        answer.conversation.title,
    )


def message_html(user: User, message_id: int, csrf_token: str) -> str:
    return _message_html(selectors.message_get(user=user, message_id=message_id), csrf_token)


class ChatConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]  # channels is untyped
    user: User
    conversation_id: int
    csrf_token: str
    session_key: str | None
    language: str = settings.LANGUAGE_CODE  # the page's, set at connect
    ended = False  # closed because the session ended: nothing more is sent or done
    counted = False  # accepted, so an open connection in /metrics until disconnect

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close()
            return
        self.user = user
        self.language = _language(self.scope)
        self.conversation_id = int(self.scope["url_route"]["kwargs"]["conversation_id"])
        try:
            answering = await in_socket_thread(in_progress_answers)(user, self.conversation_id)
        except Refused:
            await self.close()
            return
        self.csrf_token = _csrf_token(self.scope)
        self.session_key = self.scope["session"].session_key
        self.in_flight: set[int] = set(answering)
        self.writing: set[int] = set()
        for group in (runner.group_name(self.conversation_id), user_group_name(user.pk)):
            await self.channel_layer.group_add(group, self.channel_name)
            self.groups.append(group)  # the base class leaves the groups on disconnect
        runner.remember_loop()
        await self.accept()
        self.counted = True
        metrics.websocket_connected("chat")

    async def disconnect(self, code: int) -> None:
        if self.counted:
            self.counted = False
            metrics.websocket_disconnected("chat")

    # --- from the page ----------------------------------------------------------------------

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # The session cached in the scope is what it was at connect; the store says whether
        # it still exists (logout) and still matches the password (changed elsewhere).
        if not await self._session_current():
            return
        try:
            data = json.loads(text_data or "")
        except ValueError:
            return
        if not isinstance(data, dict):
            return
        try:
            if data.get("action") in ("retry", "continue"):
                await self._retry(data.get("message_id"), go_on=data.get("action") == "continue")
            else:
                chosen = (data.get("selections"), data.get("excluded"))
                await self._ask(data.get("content"), data.get("mode"), chosen)
        except Refused:
            # The conversation went away or is no longer this user's: say nothing more.
            await self.close(code=CLOSE_ACCESS_ENDED)

    async def _ask(
        self, content: object, mode: object = "", chosen: tuple[object, object] = ("", "")
    ) -> None:
        text = content if isinstance(content, str) else ""
        asked = await self._in_thread(ask)(
            self.user, self.conversation_id, text, self.csrf_token,
            mode if isinstance(mode, str) else "", chosen,
        )  # fmt: skip
        await self.send(text_data=asked.form_html)
        if asked.answer is not None:
            self.in_flight.add(asked.answer.pk)

    async def _retry(self, message_id: object, *, go_on: bool = False) -> None:
        if (pk := parse_id(str(message_id))) is None:
            return
        retried = await self._in_thread(retry)(
            self.user, self.conversation_id, pk, self.csrf_token, go_on=go_on
        )
        if retried.form_html:
            await self.send(text_data=retried.form_html)
        if retried.answer is not None:  # the runner shows it in every tab, then answers
            self.in_flight.add(retried.answer.pk)

    def _in_thread(self, function: Callable[P, R]) -> Callable[P, Awaitable[R]]:
        """`function` to await from here: in a thread, with the page's language active."""
        return in_socket_thread(_in_language(self.language, function))

    async def _session_current(self) -> bool:
        """False, having closed the socket, once its session no longer logs the user in."""
        if self.ended:
            return False
        if await in_socket_thread(session_is_current)(self.session_key, self.user.pk):
            return True
        self.ended = True
        await self.close(code=CLOSE_SESSION_ENDED)
        return False

    # --- from the groups --------------------------------------------------------------------

    async def user_close(self, event: UserClose) -> None:
        """A session of this user ended: close if it was this socket's (another device's
        socket stays open)."""
        await self._session_current()

    async def access_changed(self, event: AccessChanged) -> None:
        """The user's access to a notebook changed (notes.services: a membership revoked,
        ownership moved): a socket whose conversation they can no longer see closes at once,
        in the middle of an answer too."""
        if self.ended:
            return
        try:
            await in_socket_thread(_conversation)(self.user, self.conversation_id)
        except Refused:
            self.ended = True
            await self.close(code=CLOSE_ACCESS_ENDED)

    async def chat_show(self, event: ShowMessages) -> None:
        if self.ended:
            return
        try:
            html = await self._in_thread(show_html)(self.user, event, self.csrf_token)
        except Http404:
            return
        self.in_flight.add(event["answer_id"])
        self.writing.discard(event["answer_id"])
        await self.send(text_data=html)

    async def chat_event(self, event: dict[str, Any]) -> None:
        if self.ended:
            return
        name, data = event.get("event"), event.get("data") or {}
        try:
            message_id = int(data["message_id"])
        except (KeyError, TypeError, ValueError):
            return
        if name == "token":
            html: str = format_html(
                '<span id="message-{}-text" hx-swap-oob="beforeend">{}</span>',
                message_id,
                str(data.get("text", "")),
            )
            if message_id not in self.writing:
                self.writing.add(message_id)
                with translation.override(self.language):
                    html += self._status(message_id, _("Writing the answer…"))
            await self.send(text_data=html)
        elif name == "tool":
            with translation.override(self.language):
                status = self._status(message_id, f"{activity(data)}…")
            await self.send(text_data=status)
        elif name in ("done", "error"):
            self.in_flight.discard(message_id)
            self.writing.discard(message_id)
            try:
                rendered = await self._in_thread(message_html)(
                    self.user, message_id, self.csrf_token
                )
            except Http404:
                return
            await self.send(text_data=rendered)

    @staticmethod
    def _status(message_id: int, text: str) -> str:
        return format_html(
            '<p class="tool-status" id="message-{}-status" role="status" '
            'data-testid="tool-status" hx-swap-oob="true">{}</p>',
            message_id,
            text,
        )
