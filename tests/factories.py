from __future__ import annotations

import factory
from django.contrib.auth.models import User

from notes.models import Note, Notebook


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = User
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("correct horse battery staple")


class NotebookFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Notebook

    owner = factory.SubFactory(UserFactory)
    title = factory.Sequence(lambda n: f"Notebook {n}")


class NoteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Note

    notebook = factory.SubFactory(NotebookFactory)
    author = factory.SelfAttribute("notebook.owner")
    title = factory.Sequence(lambda n: f"Note {n}")
    body = "Some *markdown*."
