from __future__ import annotations

from django.urls import path

from search import views

app_name = "search"

urlpatterns = [
    path("search/", views.search_page, name="search"),
    path("notebooks/<int:notebook_id>/search/", views.search_page, name="notebook_search"),
]
