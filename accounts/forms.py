from __future__ import annotations

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
