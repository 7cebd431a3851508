"""Django's tasks framework, from wherever this Django has it: built in as `django.tasks`
(Django 6) or as the `django_tasks` backport (Django 5.2). The names are the same but
for one exception, InvalidTask (django.tasks) = InvalidTaskError (django_tasks)."""

from __future__ import annotations

__all__ = [
    "BUILT_IN",
    "BaseTaskBackend",
    "InvalidTaskError",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_enqueued",
    "task_finished",
    "task_started",
]

try:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    BUILT_IN = True
except ImportError:
    from django_tasks import TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

    BUILT_IN = False
