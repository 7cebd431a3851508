"""A backend for Django's tasks framework (`django.tasks` on Django 6, the `django_tasks`
backport on Django 5.2):

    TASKS = {"default": {"BACKEND": "pgqueue.contrib.django.PgQueueBackend"}}

`@task` functions then run on pgqueue workers (`manage.py pgqueue worker`), and their
results come back through Django's API (`result.refresh()`, `my_task.get_result(id)`).
OPTIONS: "APP" ("module:attr", default PGQUEUE['APP']), "MAX_ATTEMPTS" (default 3: a
failed attempt is retried with backoff, its result READY again meanwhile).

Each Django task becomes a pgqueue task named by its module path, registered on the App
when the @task decorator runs (workers import every app's `tasks` module at start). A
result's id is the pgqueue run id. Priorities map to pgqueue's (Django: higher first;
pgqueue: lower first). Enqueue joins the current atomic block, as pgqueue's enqueue does
(on psycopg2 it waits for the commit: the result's id is set and task_enqueued sent then).
"""

from __future__ import annotations

import builtins
import functools
import inspect
import re
import traceback
import uuid
from datetime import UTC, datetime
from typing import Any

from django.db import transaction
from django.utils.module_loading import import_string

from pgqueue.contrib.django import conf
from pgqueue.contrib.django._framework import (
    BaseTaskBackend,
    InvalidTaskError,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
    task_finished,
    task_started,
)
from pgqueue.contrib.django._framework import Task as DjangoTask
from pgqueue.contrib.django.transactions import PendingRunHandle
from pgqueue.errors import RunNotFound
from pgqueue.ops.operations import Operator
from pgqueue.runs.handle import RunHandle
from pgqueue.runs.run import Run
from pgqueue.states import RunState
from pgqueue.tasks.registry import Registry
from pgqueue.tasks.task import CONTEXT_ONLY, BoundTask, Task
from pgqueue.workflows.context import Context

STATUS: dict[str, Any] = {
    RunState.SCHEDULED: TaskResultStatus.READY,
    RunState.QUEUED: TaskResultStatus.READY,
    RunState.WAITING: TaskResultStatus.READY,
    RunState.RUNNING: TaskResultStatus.RUNNING,
    RunState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    RunState.FAILED: TaskResultStatus.FAILED,
    RunState.CANCELED: TaskResultStatus.FAILED,
}
MARK = "_pgqueue_django_task"  # on the function registered with pgqueue: the Django task


class PgQueueBackend(BaseTaskBackend):  # type: ignore[misc]
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    @property
    def max_attempts(self) -> int | None:
        value = self.options.get("MAX_ATTEMPTS")
        return None if value is None else int(value)

    @functools.cached_property
    def registry(self) -> Registry:
        """Where the Django tasks are registered: the registry of the App that
        OPTIONS['APP'] names, else of PGQUEUE['APP'] (set up from the settings)."""
        spec = self.options.get("APP")
        return (conf.setup(conf.load(spec)) if spec else conf.setup()).registry

    @functools.cached_property
    def operator(self) -> Operator:
        return Operator(self.registry.database)

    def validate_task(self, task: DjangoTask[Any, Any]) -> None:
        super().validate_task(task)
        if task.takes_context and inspect.iscoroutinefunction(task.func):
            raise InvalidTaskError(
                "pgqueue runs async Django tasks on the worker's event loop without a "
                "TaskContext: drop takes_context, or make the function sync"
            )
        self.pgqueue_task(task)  # registered when @task runs, so workers know it

    def pgqueue_task(self, task: DjangoTask[Any, Any]) -> Task[Any, Any]:
        """The pgqueue task that runs `task` (registered on first use)."""
        registry, name = self.registry, task.module_path
        existing = registry.tasks.get(name)
        if existing is not None and getattr(existing.fn, MARK, None) is not None:
            return existing
        runner = _runner(task, self.alias)
        # Sync runners take pgqueue's Context first (for the attempt and the signals), as
        # workflows do; async ones cannot (workflows are sync).
        register = registry.task if inspect.iscoroutinefunction(runner) else registry.workflow
        registered: Task[Any, Any] = register(
            name=name, queue=task.queue_name, priority=-task.priority
        )(runner)
        return registered

    def _bound(self, task: DjangoTask[Any, Any]) -> BoundTask[Any, Any]:
        self.validate_task(task)
        options: dict[str, Any] = {
            "queue": task.queue_name,
            "priority": -task.priority,
            "max_attempts": self.max_attempts,
        }
        if task.run_after is not None:
            options["run_at"] = task.run_after
        return self.pgqueue_task(task).options(**options)

    def enqueue(self, task: DjangoTask[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        handle = self._bound(task).enqueue(*args, **kwargs)
        return self._enqueued(task, handle, args, kwargs)

    async def aenqueue(self, task: DjangoTask[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        handle = await self._bound(task).enqueue_async(*args, **kwargs)
        return self._enqueued(task, handle, args, kwargs)

    def _enqueued(
        self, task: DjangoTask[Any, Any], handle: RunHandle, args: Any, kwargs: Any
    ) -> TaskResult[Any]:
        pending = isinstance(handle, PendingRunHandle) and not handle.committed
        result: TaskResult[Any] = TaskResult(
            task=task,
            id="" if pending else str(handle.id),
            status=TaskResultStatus.READY,
            enqueued_at=datetime.now(UTC),
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        if pending:  # psycopg2 inside atomic(): the run, and so the id, come at the commit
            transaction.on_commit(
                functools.partial(self._committed, result, handle), using=conf.database_alias()
            )
        else:
            task_enqueued.send(type(self), task_result=result)
        return result

    def _committed(self, result: TaskResult[Any], handle: RunHandle) -> None:
        object.__setattr__(result, "id", str(handle.id))
        task_enqueued.send(type(self), task_result=result)

    def get_result(self, result_id: str) -> TaskResult[Any]:
        operator = self.operator
        try:
            run = operator.get_run(int(result_id))
        except (ValueError, RunNotFound):
            raise TaskResultDoesNotExist(result_id) from None
        task = self._django_task(run)
        recorded = operator.run_errors(run.id)
        errors = [
            TaskError(
                exception_class_path=_exception_path(e["traceback"] or e["message"]),
                traceback=e["traceback"] or e["message"],
            )
            for e in recorded
            if e["kind"] != "retried"
        ]
        if run.state == RunState.CANCELED:
            errors.append(
                TaskError(
                    exception_class_path="pgqueue.errors.RunCanceled",
                    traceback=f"run {run.id} was canceled",
                )
            )
        result: TaskResult[Any] = TaskResult(
            task=task,
            id=str(run.id),
            status=STATUS[run.state],
            enqueued_at=run.created_at,
            started_at=run.started_at,
            last_attempted_at=run.started_at,
            finished_at=run.finished_at,
            args=run.args,
            kwargs=run.kwargs,
            backend=self.alias,
            errors=errors,
            worker_ids=_worker_ids(
                run.attempt, recorded, run.worker_id if run.state == RunState.RUNNING else None
            ),
        )
        object.__setattr__(result, "_return_value", run.result)
        return result

    def _django_task(self, run: Run) -> DjangoTask[Any, Any]:
        registered = self.registry.tasks.get(run.task)
        task = getattr(registered.fn, MARK, None) if registered is not None else None
        if task is None:
            try:
                task = import_string(run.task)
            except ImportError:
                task = None
        if not isinstance(task, DjangoTask):
            raise TaskResultDoesNotExist(f"run {run.id} ({run.task}) is not a Django task")
        try:
            return task.using(queue_name=run.queue, priority=-run.priority)
        except InvalidTaskError:  # a queue or priority the settings no longer allow
            return task


def _runner(task: DjangoTask[Any, Any], alias: str) -> Any:
    """The function pgqueue calls: the Django task's function, with the framework's
    signals. (Workers refresh Django's connections around it: see worker.py.)"""
    func = task.func
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return await func(*args, **kwargs)

        setattr(run_async, MARK, task)
        return run_async

    def run(ctx: Context, *args: Any, **kwargs: Any) -> Any:
        result = _running(task, alias, ctx)
        task_started.send(PgQueueBackend, task_result=result)
        try:
            if task.takes_context:
                value = func(TaskContext(task_result=result), *args, **kwargs)
            else:
                value = func(*args, **kwargs)
        except BaseException as exc:
            result.errors.append(
                TaskError(
                    exception_class_path=f"{type(exc).__module__}.{type(exc).__qualname__}",
                    traceback="".join(traceback.format_exception(exc)),
                )
            )
            _finish(result, TaskResultStatus.FAILED)
            raise
        else:
            _finish(result, TaskResultStatus.SUCCESSFUL, value)
            return value

    run.__name__ = getattr(func, "__name__", "run")
    run.__doc__ = func.__doc__
    run.__signature__ = _signature(task)  # type: ignore[attr-defined]
    setattr(run, MARK, task)
    setattr(run, CONTEXT_ONLY, True)  # a workflow only for its Context: eager() runs it
    return run


# The worker of an attempt pgqueue keeps no record of: one that succeeded, once its run
# has finished (TaskResult.attempts is len(worker_ids), so every attempt has an entry).
UNRECORDED_WORKER = "pgqueue"


def _worker_ids(
    attempts: int, errors: list[dict[str, Any]], running: uuid.UUID | None
) -> list[str]:
    """The worker of each of a run's `attempts`, oldest first: the worker recorded with a
    failed or expired attempt (pgqueue.run_errors), the worker of the attempt running
    now, else UNRECORDED_WORKER."""
    by_attempt = {e["attempt"]: str(e["worker_id"]) for e in errors if e["worker_id"]}
    if running is not None:
        by_attempt[attempts] = str(running)
    return [by_attempt.get(n, UNRECORDED_WORKER) for n in range(1, attempts + 1)]


def _running(task: DjangoTask[Any, Any], alias: str, ctx: Context) -> TaskResult[Any]:
    now = datetime.now(UTC)
    # a first attempt (most runs) asks the database nothing
    earlier = (
        Operator(ctx.database).run_errors(ctx.run_id) if ctx.attempt > 1 and ctx.database else []
    )
    return TaskResult(
        task=task,
        id=str(ctx.run_id),
        status=TaskResultStatus.RUNNING,
        enqueued_at=None,
        started_at=now,
        last_attempted_at=now,
        finished_at=None,
        args=ctx.args,
        kwargs=ctx.kwargs,
        backend=alias,
        errors=[],
        worker_ids=_worker_ids(ctx.attempt, earlier, ctx.worker_id),
    )


def _finish(result: TaskResult[Any], status: TaskResultStatus, value: Any = None) -> None:
    object.__setattr__(result, "status", status)
    object.__setattr__(result, "finished_at", datetime.now(UTC))
    object.__setattr__(result, "_return_value", value)
    task_finished.send(PgQueueBackend, task_result=result)


def _signature(task: DjangoTask[Any, Any]) -> inspect.Signature:
    """(ctx, *the Django function's parameters but `context`): pgqueue drops ctx and checks
    arguments against the rest at enqueue."""
    signature = inspect.signature(task.func)
    params = list(signature.parameters.values())[1 if task.takes_context else 0 :]
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_ONLY)
    return signature.replace(parameters=[ctx, *params])


_LAST_LINE = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def _exception_path(text: str) -> str:
    """The exception class of an error as Django's TaskError wants it ("module.Class"),
    from the last line of a traceback or a "Class: message" error message."""
    lines = text.strip().splitlines()
    match = _LAST_LINE.match(lines[-1].strip()) if lines else None
    if match is None:
        return "builtins.Exception"
    name = match.group(1)
    if "." not in name:
        return f"builtins.{name}" if hasattr(builtins, name) else "builtins.Exception"
    return name
