from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy as _

from chat.modes import MODES


class AskForm(forms.Form):
    # Length and emptiness are checked by chat.services.message_ask, whose errors land here;
    # maxlength only spares the user typing past the limit.
    content = forms.CharField(
        label=_("Your question"),
        required=False,
        strip=False,
        widget=forms.Textarea(
            attrs={
                "rows": 2,
                "maxlength": settings.CHAT_QUESTION_MAX_CHARS,
                "placeholder": _("Ask a question about these sources…"),
            }
        ),
    )

    mode = forms.ChoiceField(
        label=_("Mode"),
        required=False,
        choices=[(m.name, m.label) for m in MODES.values()],
        help_text=_("How the answer is written"),
    )

    @classmethod
    def refusing(cls, message: str) -> AskForm:
        """An empty ask form with `message` above it (a retry refused: over the budget)."""
        form = cls({"content": ""})
        form.is_valid()
        form.add_error(None, message)
        return form


class RenameForm(forms.Form):
    title = forms.CharField(label=_("Title"), max_length=200)
