"""Settings of the example project. The database comes from $DATABASE_URL; pgqueue uses
the same database (DATABASES["default"]): there is no second DSN to configure."""

import os
from pathlib import Path

import django
from psycopg.conninfo import conninfo_to_dict

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-a-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "pgqueue.contrib.django",  # manage.py pgqueue, the admin for runs, transactional enqueue
    "orders",
]
if django.VERSION < (6,):  # Django 6 has the tasks framework built in (django.tasks)
    INSTALLED_APPS.insert(-2, "django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "myproj.urls"
WSGI_APPLICATION = "myproj.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def database(url: str) -> dict[str, object]:
    """DATABASES entry from a postgresql:// URL (psycopg parses it; no extra package)."""
    params = conninfo_to_dict(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": params.get("dbname", "myproj"),
        "USER": params.get("user", ""),
        "PASSWORD": params.get("password", ""),
        "HOST": params.get("host", ""),
        "PORT": params.get("port", ""),
    }


DATABASES = {
    "default": database(os.environ.get("DATABASE_URL", "postgresql://postgres@localhost/myproj"))
}

# pgqueue: the App with the project's tasks. DATABASE defaults to "default".
PGQUEUE = {"APP": "myproj.tasks:app"}

# Django's tasks framework (django.tasks on Django 6, django_tasks on 5.2), run by
# pgqueue workers.
TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.PgQueueBackend",
        "QUEUES": ["default", "receipts"],
    }
}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
