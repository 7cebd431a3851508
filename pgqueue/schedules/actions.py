"""App's calls for schedules (App inherits them): define them in code (periodic, schedule),
list, pause, resume and trigger them in the database (pgqueue.schedules)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, cast

from pgqueue.runs.handle import RunHandle
from pgqueue.schedules.schedule import (
    Schedule,
    check_cron,
    define,
    list_all,
    set_paused,
    trigger,
)
from pgqueue.tasks import registry as _registry
from pgqueue.tasks.task import Task

if TYPE_CHECKING:
    from pgqueue.app import App

P = ParamSpec("P")
R = TypeVar("R")


class ScheduleActions:
    """Mixed into App."""

    def _app(self) -> App:
        return cast("App", self)

    def periodic(
        self,
        *,
        cron: str,
        tz: str = "UTC",
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        queue: str | None = None,
        catch_up: bool = False,
        name: str | None = None,
    ) -> Callable[[Callable[P, R]], Task[P, R]]:
        """Enqueue a task at every tick of `cron` (in zone `tz`) with `args`/`kwargs`.

        Put it above `@app.task(...)`, or use it alone (the function is then registered
        as a task with default options). The schedule is named after the task unless
        `name=` is given, which a task with several schedules needs. A bad expression or
        zone raises pgqueue.InvalidSchedule here. See docs/schedules.md."""
        check_cron(cron, tz)

        def decorate(target: Callable[P, R]) -> Task[P, R]:
            task: Task[P, R] = target if isinstance(target, Task) else self._app().task(target)
            self.schedule(
                name or task.name,
                cron,
                task,
                args=args,
                kwargs=kwargs,
                tz=tz,
                queue=queue,
                catch_up=catch_up,
            )
            return task

        return decorate

    def schedule(
        self,
        name: str,
        cron: str,
        task: Task[Any, Any] | str,
        *,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        tz: str = "UTC",
        queue: str | None = None,
        catch_up: bool = False,
    ) -> Schedule:
        """Define schedule `name`: enqueue `task` (a Task, or a task name this process
        may not import) at every tick of `cron` in zone `tz`. Workers write it to
        pgqueue.schedules when they start. After downtime only the latest missed tick
        fires, unless catch_up=True (then every missed tick, at most 100)."""
        app = self._app()
        definition = define(
            app, name, cron, task, args=args, kwargs=kwargs, tz=tz, queue=queue, catch_up=catch_up
        )
        return _registry.add_schedule(app.schedules, name, definition)

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule in the database (those of all apps), by name."""
        with self._app().connection() as c:
            return list_all(c)

    def pause_schedule(self, name: str) -> None:
        with self._app().connection() as c:
            set_paused(c, name, True)

    def resume_schedule(self, name: str) -> None:
        """Resume from the next tick after now (ticks passed while paused do not fire)."""
        with self._app().connection() as c:
            set_paused(c, name, False)

    def trigger_schedule(self, name: str) -> RunHandle:
        """Enqueue one run of schedule `name` now, outside its cron."""
        app = self._app()
        with app.connection() as c:
            return RunHandle(trigger(c, name), app)
