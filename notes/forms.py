from __future__ import annotations

from django import forms
from django.conf import settings
from django.utils.translation import gettext_lazy

from notes.models import Note, Notebook


class NotebookForm(forms.ModelForm[Notebook]):
    class Meta:
        model = Notebook
        fields = ["title", "description"]
        labels = {"title": gettext_lazy("Title"), "description": gettext_lazy("Description")}
        widgets = {
            "title": forms.TextInput(
                attrs={"placeholder": gettext_lazy("e.g. Thesis reading"), "autofocus": True}
            ),
            "description": forms.Textarea(
                attrs={"rows": 2, "placeholder": gettext_lazy("Optional")}
            ),
        }


class NoteForm(forms.ModelForm[Note]):
    body = forms.CharField(
        required=False,
        max_length=settings.NOTE_BODY_MAX_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 18, "class": "mono", "spellcheck": "true"}),
        label=gettext_lazy("Body"),
        help_text=gettext_lazy(
            "Markdown: **bold**, _italic_, # headings, - lists, [links](https://…), tables."
        ),
    )

    class Meta:
        model = Note
        fields = ["title", "body"]
        labels = {"title": gettext_lazy("Title")}
        widgets = {"title": forms.TextInput(attrs={"placeholder": gettext_lazy("Untitled note")})}

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["title"].required = False


ROLE_CHOICES = [("viewer", gettext_lazy("Viewer")), ("editor", gettext_lazy("Editor"))]


class ShareForm(forms.Form):
    user = forms.CharField(
        max_length=254,
        label=gettext_lazy("Username or email"),
        widget=forms.TextInput(attrs={"autocomplete": "off", "spellcheck": "false"}),
    )
    role = forms.ChoiceField(choices=ROLE_CHOICES, initial="viewer", label=gettext_lazy("Role"))


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES, label=gettext_lazy("Role"))
