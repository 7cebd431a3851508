"""The example project's URLs with the dashboard mounted (tests/dashboard/test_django.py)."""

from django.urls import include, path
from myproj.urls import urlpatterns as project

urlpatterns = [*project, path("ops/pgqueue/", include("pgqueue.contrib.django.urls"))]
