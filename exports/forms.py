from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms
from django.utils.translation import gettext, gettext_lazy

if TYPE_CHECKING:
    from core.types import User


class AccountDeleteForm(forms.Form):
    """Confirms an account deletion with the password, or, for an account without a usable
    password (made by an administrator or single sign-on), with its username typed out."""

    confirmation = forms.CharField(strip=False, max_length=4096)

    def __init__(self, *args: Any, user: User, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
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
