"""path("pgqueue/", include("pgqueue.contrib.django.urls")): the dashboard, behind
Django's login (staff to view, pgqueue.change_run to act). See docs/dashboard.md."""

from __future__ import annotations

from django.urls import path

from pgqueue.contrib.django.dashboard import view

app_name = "pgqueue"
urlpatterns = [
    path("", view, name="dashboard"),
    path("<path:path>", view),
]
