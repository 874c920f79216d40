from __future__ import annotations

from django import forms
from django.conf import settings

from notes.models import Note, Notebook


class NotebookForm(forms.ModelForm[Notebook]):
    class Meta:
        model = Notebook
        fields = ["title", "description"]
        widgets = {
            "title": forms.TextInput(
                attrs={"placeholder": "e.g. Thesis reading", "autofocus": True}
            ),
            "description": forms.Textarea(attrs={"rows": 2, "placeholder": "Optional"}),
        }


class NoteForm(forms.ModelForm[Note]):
    body = forms.CharField(
        required=False,
        max_length=settings.NOTE_BODY_MAX_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 18, "class": "mono", "spellcheck": "true"}),
        help_text="Markdown: **bold**, _italic_, # headings, - lists, [links](https://…), tables.",
    )

    class Meta:
        model = Note
        fields = ["title", "body"]
        widgets = {"title": forms.TextInput(attrs={"placeholder": "Untitled note"})}

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.fields["title"].required = False
