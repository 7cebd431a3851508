"""The example project (examples/django_project) as `django-admin startproject` makes
a project: its default database on SQLite, which pgqueue cannot use."""

from myproj.settings import *  # noqa: F403

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
