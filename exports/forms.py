from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.utils.translation import gettext, gettext_lazy

from notes.models import Notebook, NotebookMembership

if TYPE_CHECKING:
    from core.types import User


class AccountDeleteForm(forms.Form):
    """Confirms an account deletion with the password, or, for an account without a usable
    password (made by an administrator or single sign-on), with its username typed out."""

    confirmation = forms.CharField(strip=False, max_length=4096)

    def __init__(
        self,
        *args: Any,
        user: User,
        shared: list[tuple[Notebook, list[NotebookMembership]]] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        # Each notebook shared with others: hand it to one of them (the first, by default),
        # or delete it for everyone.
        self.shared = shared or []
        for notebook, members in self.shared:
            choices = [(str(m.user_id), gettext("Hand it to %(user)s") % {
                "user": m.user.get_username()}) for m in members]  # fmt: skip
            choices.append(("delete", gettext("Delete it for everyone")))
            self.fields[f"handover_{notebook.pk}"] = forms.ChoiceField(
                choices=choices, initial=choices[0][0], label=notebook.title
            )
        field = self.fields["confirmation"]
        if user.has_usable_password():
            field.label = gettext_lazy("Your password")
            field.widget = forms.PasswordInput(attrs={"autocomplete": "current-password"})
        else:
            field.label = gettext_lazy("Type your username to confirm")
            field.widget = forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"})

    def clean_confirmation(self) -> str:
        value: str = self.cleaned_data["confirmation"]
        if self.user.has_usable_password():
            if not self.user.check_password(value):
                raise forms.ValidationError(gettext("That is not your password."), code="wrong")
        elif value != self.user.get_username():
            raise forms.ValidationError(
                gettext("Type your username exactly as it is shown."), code="wrong"
            )
        return value

    def handover(self) -> dict[int, int]:
        """Notebook id → id of the member who takes it over, from the choices made."""
        chosen = {}
        for notebook, _ in self.shared:
            value = self.cleaned_data.get(f"handover_{notebook.pk}", "delete")
            if value != "delete":
                chosen[notebook.pk] = int(value)
        return chosen
