"""`python -m tests.django_site.without_jinja2`: the mounted dashboard's project as with
only pgqueue-jobs[django] installed (no jinja2). `manage.py check` loads the URLconf;
then the dashboard's handler is asked for, and its view is requested by a staff user."""

from __future__ import annotations

import sys

sys.modules["jinja2"] = None  # type: ignore[assignment]  # `import jinja2` fails

import django  # noqa: E402
from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.management import call_command  # noqa: E402

django.setup()
call_command("check")
from pgqueue.contrib.django.dashboard import dashboard  # noqa: E402

try:
    dashboard()
except ImproperlyConfigured as exc:
    print(f"dashboard: {exc}")

from types import SimpleNamespace  # noqa: E402

from django.test import RequestFactory  # noqa: E402

from pgqueue.contrib.django.dashboard import view  # noqa: E402

request = RequestFactory().get("/ops/pgqueue/")
request.user = SimpleNamespace(  # type: ignore[assignment]
    is_authenticated=True, is_active=True, is_staff=True
)
try:
    view(request, "")
except ImproperlyConfigured as exc:
    print(f"view: {exc}")
