from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.models import User
from django.utils.translation import gettext_lazy


class SignupForm(UserCreationForm[User]):
    class Meta(UserCreationForm.Meta):
        fields = ("username",)


class ApiTokenForm(forms.Form):
    name = forms.CharField(
        label=gettext_lazy("Name"),
        max_length=100,
        widget=forms.TextInput(attrs={"placeholder": gettext_lazy("e.g. backup script")}),
    )
    read_only = forms.BooleanField(
        label=gettext_lazy("Read-only"),
        required=False,
        help_text=gettext_lazy("It can read and ask, but not create, change or delete anything."),
    )
    notebooks = forms.TypedMultipleChoiceField(
        label=gettext_lazy("Limit to notebooks"),
        coerce=int,
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=gettext_lazy("Tick none for all your notebooks."),
    )

    def __init__(self, *args: Any, notebooks: list[tuple[int, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["notebooks"].choices = notebooks  # type: ignore[attr-defined]
