"""Template helpers about the chat model's state in this process (templates/chat/_message.html)."""

from __future__ import annotations

from django import template
from django.conf import settings
from django.utils.translation import gettext as _

from core.breakers import breaker

register = template.Library()


@register.simple_tag
def model_skipped_notice() -> str:
    """While the chat model's breaker is open, what a Retry will do instead (answer from the
    sources) and when waiting would bring the model back; "" while the model is asked."""
    if not settings.CHAT_MODEL:
        return ""
    circuit = breaker("llm")
    if circuit.state != "open":
        return ""
    return _(
        "The language model failed %(failures)s times in a row and is skipped for now: Retry "
        "answers from your sources directly (quoting them, without the model). To have the "
        "model answer, wait about %(seconds)s s, until it is tried again, then Retry."
    ) % {"failures": circuit.threshold, "seconds": max(1, round(circuit.retry_in()))}
