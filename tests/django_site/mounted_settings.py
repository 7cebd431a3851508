"""The example project (examples/django_project) with the dashboard mounted under
/ops/pgqueue/ (tests/django_site/dashboard_urls.py), for processes of its own."""

from myproj.settings import *  # noqa: F403

ROOT_URLCONF = "tests.django_site.dashboard_urls"
