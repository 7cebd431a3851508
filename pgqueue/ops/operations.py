"""The Operator: the calls of operators and inspection on a database (App delegates to
it): runs and their errors and steps, cancel and retry (one run, or every run that
matches a filter), queue limits and pauses, groups, workers, schedules in the database,
pruning history. Each opens one pooled connection and runs its query in pgqueue.runs.read,
pgqueue.ops.inspect, operator, bulk or retention, or pgqueue.schedules.schedule."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg

from pgqueue.db import sql as _sql
from pgqueue.enqueue.checks import check_name
from pgqueue.errors import InvalidArguments, UserError
from pgqueue.ops import bulk as _bulk
from pgqueue.ops import inspect as _inspect
from pgqueue.ops import operator as _operator
from pgqueue.ops import retention as _retention
from pgqueue.runs import read as _read
from pgqueue.runs.handle import RunHandle
from pgqueue.runs.run import Run
from pgqueue.schedules import schedule as _schedules
from pgqueue.tasks import registry as _registry
from pgqueue.tasks.rates import KEEP, Keep

if TYPE_CHECKING:
    from pgqueue.db.database import AsyncConn, Database


class Operator:
    """Operations and inspection on `database`."""

    def __init__(self, database: Database) -> None:
        self.database = database

    def get_run(self, run_id: int, *, conn: psycopg.Connection[Any] | None = None) -> Run:
        with self.database.connection(conn) as c:
            return _read.get_run(c, run_id)

    async def get_run_async(self, run_id: int, *, conn: AsyncConn | None = None) -> Run:
        async with self.database.async_connection(conn) as c:
            return await _read.get_run_async(c, run_id)

    def list_runs(
        self,
        *,
        state: str | None = None,
        queue: str | None = None,
        task: str | None = None,
        limit: int = 50,
    ) -> list[Run]:
        with self.database.connection() as c:
            return _inspect.list_runs(c, state=state, queue=queue, task=task, limit=limit)

    def run_errors(self, run_id: int) -> list[dict[str, Any]]:
        with self.database.connection() as c:
            return _inspect.rows(c, "run_errors", {"id": run_id})

    def cancel(self, run_id: int, *, children: bool = False, reason: str | None = None) -> bool:
        """Cancel a run that has not finished; a running one is told to stop, a waiting
        parent is woken. `children=True` cancels its child runs too. `reason` (at most
        1,000 bytes) is stored as the run's cancel_reason. Returns False if the run had
        already finished."""
        with self.database.connection() as c:
            return _operator.cancel(c, run_id, children=children, reason=reason)

    def run_steps(self, run_id: int) -> list[dict[str, Any]]:
        with self.database.connection() as c:
            return _inspect.rows(c, "run_steps", {"id": run_id})

    def retry(self, run_id: int) -> bool:
        """Queue a finished run again for one more attempt (recorded in run_errors).
        Returns False if the run has not finished."""
        with self.database.connection() as c:
            return _operator.retry(c, run_id)

    def set_limits(
        self,
        queue: str,
        *,
        concurrency: int | None,
        group_concurrency: int | None,
        rate_limit: str | Keep | None = KEEP,
        group_rate_limit: str | Keep | None = KEEP,
        ordered: bool | Keep = KEEP,
    ) -> None:
        """Change a queue's cluster-wide limits now (None: no limit); workers apply it to
        their next claim. Rate limits and `ordered` not given keep their stored values. A
        worker that starts with app.queue(...) declarations writes those back."""
        name = check_name("queue", queue)
        with self.database.connection() as c:
            stored = _operator.flow_limits(c, name)
            rate = stored["rate_limit"] if isinstance(rate_limit, Keep) else rate_limit
            group_rate = (
                stored["group_rate_limit"]
                if isinstance(group_rate_limit, Keep)
                else group_rate_limit
            )
            in_order = stored["ordered"] if isinstance(ordered, Keep) else ordered
            _registry.check_limits(
                queue, concurrency, group_concurrency, rate, group_rate, in_order
            )
            weighed = _operator.group_weights(c, name)
            if weighed and weighed["group_weights"] and concurrency is group_concurrency is None:
                raise InvalidArguments(
                    f"queue {queue!r} has group weights, which share out its permits: keep "
                    "a concurrency or group_concurrency, or remove the weights first "
                    "(`pgqueue queues set --no-group-weights`)"
                )
            _operator.set_limits(
                c, name, concurrency, group_concurrency, rate, group_rate, in_order
            )

    def set_group_weights(
        self,
        queue: str,
        group_weights: Mapping[str, int] | None,
        *,
        default_group_weight: int | Keep = KEEP,
    ) -> None:
        """Replace a queue's group weights now (None or {}: no weights, plain turns);
        default_group_weight not given keeps its stored value. The queue must be stored
        with a concurrency or group_concurrency limit. A worker that starts with
        app.queue(...) declarations writes those back."""
        name = check_name("queue", queue)
        with self.database.connection() as c:
            stored = _operator.group_weights(c, name)
            if stored is None:
                raise UserError(
                    f"queue {queue!r} has no limits stored: set its concurrency or "
                    "group_concurrency first (the weights share those permits out)"
                )
            default = (
                stored["default_group_weight"]
                if isinstance(default_group_weight, Keep)
                else default_group_weight
            )
            weights = _registry.check_weights(
                queue, group_weights, default, stored["concurrency"], stored["group_concurrency"]
            )
            _operator.set_group_weights(c, name, weights, default)

    def group_weights(self, queue: str) -> dict[str, Any] | None:
        """The queue's stored group weights ({} for none), default group weight and permit
        limits; None if the queue is not stored."""
        with self.database.connection() as c:
            return _operator.group_weights(c, check_name("queue", queue))

    def groups(self, queue: str | None = None, limit: int = 10) -> list[dict[str, Any]]:
        """The busiest groups (most running, then most queued), from pgqueue.groups."""
        with self.database.connection() as c:
            return _inspect.rows(c, "busiest_groups", {"queue": queue, "limit": limit})

    def set_paused(self, queue: str, paused: bool) -> None:
        """Pause or resume `queue`; a resume lifts its backoffs too (RetryAfter(scope=
        "queue" | "group"))."""
        with self.database.connection() as c:
            _operator.set_paused(c, queue, paused)

    def set_priority_aging(self, queue: str, seconds: float | None) -> None:
        """Age `queue`'s waiting runs: one priority step up every `seconds` they wait
        (None: no aging, and the waiting runs get their base priority back)."""
        name = check_name("queue", queue)
        aging = _registry.check_aging(name, seconds)
        with self.database.connection() as c:
            c.execute(_sql.query("set_priority_aging"), {"queue": name, "aging": aging})

    def lift_group_backoff(self, queue: str, group: str) -> bool:
        """Lift the backoff of group `group` of `queue` (RetryAfter(scope="group")): its
        runs may start at once. False if none was in force."""
        with self.database.connection() as c:
            row = c.execute(
                _sql.query("lift_group_backoff"), {"queue": queue, "group": group}
            ).fetchone()
        return bool(row and row[0])

    def run_backoffs(self, run_id: int) -> list[dict[str, Any]]:
        """The backoffs in force that hold run `run_id` back: its queue's (scope
        "queue"), its group's (scope "group"), with `until`."""
        with self.database.connection() as c:
            return _inspect.rows(c, "run_backoffs", {"ids": [run_id]})

    def queue_summary(self) -> list[dict[str, Any]]:
        with self.database.connection() as c, c.transaction():
            c.execute(_sql.query("no_jit"))
            return _inspect.rows(c, "queue_summary")

    def list_workers(self) -> list[dict[str, Any]]:
        with self.database.connection() as c:
            return _inspect.rows(c, "list_workers")

    def prune(
        self,
        older_than: timedelta | float,
        *,
        states: Sequence[str] = _retention.FINISHED_STATES,
        events: bool = False,
        audit: bool = False,
    ) -> dict[str, int]:
        """Delete runs in `states` that finished more than `older_than` (seconds or a
        timedelta) ago, with their steps and errors, events created before then with
        events=True, and audit entries recorded before then with audit=True; in batches.
        Workers do this on their own (Worker(retention=...)). Returns how many rows went,
        by state (and "events", "audit")."""
        age = older_than if isinstance(older_than, timedelta) else timedelta(seconds=older_than)
        with self.database.connection() as c:
            return _retention.prune(c, age, states=states, events=events, audit=audit)

    # -- bulk actions -------------------------------------------------------------------

    def count_where(self, /, action: str, **filters: Any) -> int:
        """How many runs `cancel_where` ("cancel") or `retry_where` ("retry") with these
        filters would reach now."""
        with self.database.connection() as c:
            return _bulk.count(c, action, _bulk.Filter.of(**filters))

    def cancel_where(
        self,
        *,
        state: str | Sequence[str] | None = None,
        queue: str | None = None,
        task: str | None = None,
        group: str | None = None,
        older_than: timedelta | float | None = None,
        all_runs: bool = False,
        batch_size: int = _bulk.DEFAULT_BATCH,
        reason: str | None = None,
    ) -> int:
        """Cancel every unfinished run that matches (states among scheduled, queued,
        running, waiting; queue; task; group; created more than `older_than` seconds or
        a timedelta ago), each as `app.cancel(id, reason=reason)` would, `batch_size`
        runs per transaction. With no filter, `all_runs=True` is required. Returns how
        many runs were canceled."""
        filt = _bulk.Filter.of(
            state=state,
            queue=queue,
            task=task,
            group=group,
            older_than=older_than,
            all_runs=all_runs,
        )
        with self.database.connection() as c:
            return _bulk.act(c, "cancel", filt, batch_size=batch_size, reason=reason)

    def retry_where(
        self,
        *,
        state: str | Sequence[str] | None = None,
        queue: str | None = None,
        task: str | None = None,
        group: str | None = None,
        older_than: timedelta | float | None = None,
        all_runs: bool = False,
        batch_size: int = _bulk.DEFAULT_BATCH,
    ) -> int:
        """Queue again every finished run that matches (states among succeeded, failed,
        canceled; the other filters as in cancel_where), each as `app.retry(id)` would,
        `batch_size` runs per transaction. Returns how many runs were queued again."""
        filt = _bulk.Filter.of(
            state=state,
            queue=queue,
            task=task,
            group=group,
            older_than=older_than,
            all_runs=all_runs,
        )
        with self.database.connection() as c:
            return _bulk.act(c, "retry", filt, batch_size=batch_size)

    def purge_queue(self, queue: str, *, batch_size: int = _bulk.DEFAULT_BATCH) -> int:
        """Cancel every run of `queue` that has not started (queued or scheduled);
        running and waiting runs go on. Returns how many were canceled."""
        with self.database.connection() as c:
            return _bulk.act(c, "cancel", _bulk.purge_filter(queue), batch_size=batch_size)

    # -- schedules in the database -------------------------------------------------------

    def list_schedules(self) -> list[dict[str, Any]]:
        """Every schedule in the database (those of all apps), by name."""
        with self.database.connection() as c:
            return _schedules.list_all(c)

    def pause_schedule(self, name: str) -> None:
        with self.database.connection() as c:
            _schedules.set_paused(c, name, True)

    def resume_schedule(self, name: str) -> None:
        """Resume from the next tick after now (ticks passed while paused do not fire)."""
        with self.database.connection() as c:
            _schedules.set_paused(c, name, False)

    def trigger_schedule(self, name: str) -> RunHandle:
        """Enqueue one run of schedule `name` now, outside its cron."""
        with self.database.connection() as c:
            return RunHandle(_schedules.trigger(c, name), self.database)
