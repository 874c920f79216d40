from __future__ import annotations

import factory
from django.contrib.auth.models import User
from factory.declarations import SelfAttribute, Sequence, SubFactory

from notes.models import Note, Notebook


class UserFactory(factory.django.DjangoModelFactory[User]):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = Sequence(lambda n: f"user{n}")
    password = factory.django.Password("correct horse battery staple")


class NotebookFactory(factory.django.DjangoModelFactory[Notebook]):
    class Meta:
        model = Notebook

    owner = SubFactory(UserFactory)
    title = Sequence(lambda n: f"Notebook {n}")


class NoteFactory(factory.django.DjangoModelFactory[Note]):
    class Meta:
        model = Note

    notebook = SubFactory(NotebookFactory)
    author = SelfAttribute("notebook.owner")
    title = Sequence(lambda n: f"Note {n}")
    body = "Some *markdown*."
