"""Durable workflow operations: memoized steps, sleeps, event waits and child runs.

A workflow's code re-executes from the top on every attempt and after every durable
wait; only steps (and the outcome of sleeps, waits and calls, which are steps too) are
stored. Everything here blocks: it is called from a sync workflow's own thread, or, for
an `async def` workflow (AsyncContext), from a worker thread the loop awaits. It writes
through the App's pool, fenced by the lease the worker holds.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from psycopg.rows import dict_row

from pgqueue.db import payload as _json
from pgqueue.db import sql as _sql
from pgqueue.enqueue import events as _events
from pgqueue.enqueue.checks import MAX_KEY_BYTES, check_key, check_name, check_seconds
from pgqueue.errors import ChildMissing, LeaseLost, NonDeterministic, UserError
from pgqueue.states import RunState, StepState
from pgqueue.workflows.determinism import call_text, step_call
from pgqueue.workflows.running_steps import RUNNING_STEPS, Shown

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.enqueue.enqueuer import Enqueuer
    from pgqueue.runs.handle import RunHandle
    from pgqueue.tasks.task import Task

log = logging.getLogger("pgqueue.worker")

CHILD_KEY = "pgqueue.child:{parent}:{name}"


# The step that records which version of its workflow's code a run started on
# (@app.workflow(version=...)); a worker with another version leaves the run for one that
# has it, looking again after VERSION_RETRY seconds (no attempt used).
VERSION_STEP = "pgqueue.version"
VERSION_RETRY = 5.0

# The step that records a run's answer to ctx.patched(change_id): not a durable operation
# (it takes no position), so adding a patch moves no other step of a run in flight.
PATCH_PREFIX = "pgqueue.patch:"


def patch_step(change_id: str) -> str:
    if not isinstance(change_id, str) or not change_id or "#" in change_id:
        raise UserError(f"a patch id must be a non-empty string without '#', not {change_id!r}")
    check_key("patch id", change_id, limit=MAX_KEY_BYTES - 64)
    return PATCH_PREFIX + change_id


class Suspend(BaseException):
    """Unwinds a workflow that must wait; the worker turns it into `scheduled`/`waiting`
    without using an attempt. A BaseException so user code cannot swallow it."""

    def __init__(
        self,
        state: str,
        delay: float | None,
        *,
        wait_event: str | None = None,
        wait_key: str | None = None,
        wait_since: datetime | None = None,
        wait_run_id: int | None = None,
        wake_at: datetime | None = None,
    ) -> None:
        super().__init__(state)
        self.state = state
        self.delay = delay
        # when the wait ends, on the database's clock: the run's run_at is set to it
        # exactly, not to the completion's now() + delay (a few milliseconds later)
        self.wake_at = wake_at
        self.wait_event = wait_event
        self.wait_key = wait_key
        self.wait_since = wait_since
        self.wait_run_id = wait_run_id


@dataclass(slots=True)
class Begun:
    """A step whose body runs: when it started, and its `running` row if that is written
    later (RUNNING_STEPS), which done() drops once the body has ended."""

    started: datetime
    shown: Shown | None

    def done(self) -> None:
        if self.shown is not None:
            self.shown.done()


@dataclass
class StepRecord:
    name: str
    state: str
    output: Any
    error: str | None
    created_at: datetime
    # what it was called as (determinism.py); None for steps recorded before revision 0027
    position: int | None = None
    call: str | None = None


class Parts(Protocol):
    """What a workflow attempt writes through: an App, or anything holding the two."""

    @property
    def database(self) -> Database: ...

    @property
    def enqueuer(self) -> Enqueuer: ...


class Durable:
    """The stored side of one workflow attempt."""

    def __init__(
        self,
        parts: Parts,
        run_id: int,
        lease_token: str,
        attempt: int,
        *,
        has_steps: bool = True,
        holds: Callable[[], bool] | None = None,
    ) -> None:
        self.database = parts.database
        self.enqueuer = parts.enqueuer
        # True while the worker knows it holds the run (not lost or canceled, its leases
        # renewed lately): a step then starts without a round trip (step())
        self.holds = holds
        self.run_id = run_id
        self.lease_token = lease_token
        self.attempt = attempt
        # None: not loaded yet. A run with no stored step (the claim says so) skips the load.
        self._steps: dict[str, StepRecord] | None = None if has_steps else {}
        self._seen: Counter[str] = Counter()
        # each unique name's position among this execution's durable operations, and the
        # call it was made as (check()): written with each of its records
        self._positions: dict[str, int] = {}
        self._calls: dict[str, str] = {}
        # an async workflow's concurrent operations (asyncio.gather) may each load first
        self._load_lock = threading.Lock()
        self.db_now: datetime | None = None

    # -- names and records ------------------------------------------------------------

    def unique_name(self, name: str) -> str:
        """`name`, then `name#2`, `name#3`... in call order, so loops work. Called by the
        Context for each durable operation (at the call, before anything is awaited, in
        an async workflow): the operations below take the name it returns."""
        if not isinstance(name, str) or not name or "#" in name:
            raise UserError(f"step name must be a non-empty string without '#', not {name!r}")
        # a child's idempotency key holds the name (CHILD_KEY): room for it within the limit
        check_key("step name", name, limit=MAX_KEY_BYTES - 64)
        self._seen[name] += 1
        n = self._seen[name]
        unique = name if n == 1 else f"{name}#{n}"
        self._positions[unique] = len(self._positions)
        return unique

    def check(self, name: str, call: str) -> StepRecord | None:
        """The stored record of the operation `name` (unique), once checked against how
        this execution calls it: a record the replay would reuse (a step that succeeded,
        a wait under way) must have been made at the same position as the same call,
        else NonDeterministic. A step that failed or was interrupted runs again anyway,
        and records from before revision 0027 carry nothing to compare."""
        self._calls[name] = call
        rec = self.get(name)
        if (
            rec is None
            or rec.call is None
            or rec.position is None
            or rec.state not in (StepState.SUCCEEDED, StepState.WAITING)
        ):
            return rec
        position = self._positions.get(name, -1)
        if rec.position != position or rec.call != call:
            raise NonDeterministic(self.run_id, name, position, call, rec.position, rec.call)
        return rec

    # -- versions and patches (workflow code that changes) ------------------------------

    def check_version(self, workflow: str, version: str) -> None:
        """Before the workflow's code runs: record `version` for a run that has none yet;
        a run that started on another version is left (Suspend: scheduled again in
        VERSION_RETRY seconds, no attempt used) for a worker that has that version."""
        rec = self.get(VERSION_STEP)
        if rec is None or rec.state != StepState.SUCCEEDED:
            text = _json.dumps(version, what="a workflow version")
            self.record(VERSION_STEP, StepState.SUCCEEDED, output=text)
            return
        if rec.output == version:
            return
        log.warning(
            "run %s (%s) started on version %r of its code; this worker has %r: left for "
            "a worker that has it, again in %g s",
            self.run_id,
            workflow,
            rec.output,
            version,
            VERSION_RETRY,
        )
        raise Suspend(RunState.SCHEDULED, VERSION_RETRY)

    def next_position(self) -> int:
        """The position the next durable operation of this execution takes."""
        return len(self._positions)

    def patched(self, change_id: str, position: int) -> bool:
        """Whether this run takes the code of patch `change_id`, asked at `position`
        (next_position() at the call). The first answer is recorded (a step named
        PATCH_STEP, which takes no position) and every replay of the run gets it again:
        True for a run that reaches this point on code that has the patch, False for a
        run whose history already went past it without (a step recorded at `position`
        or later; or any step recorded before revision 0027, which carries no position:
        such a run started on older code)."""
        name = patch_step(change_id)
        rec = self.get(name)
        if rec is not None and rec.state == StepState.SUCCEEDED:
            return bool(rec.output)
        assert self._steps is not None  # get() loaded them
        passed = any(
            r.position is None or r.position >= position
            for r in self._steps.values()
            if not r.name.startswith(PATCH_PREFIX)
        )
        self.record(name, StepState.SUCCEEDED, output="false" if passed else "true")
        return not passed

    def deprecate_patch(self, change_id: str) -> None:
        """The code of patch `change_id` is the only code now (its `if ctx.patched(...)`
        removed): a run that recorded False for it started on the code before the patch
        and cannot replay this code, so it fails with NonDeterministic; any other run
        goes on."""
        rec = self.get(patch_step(change_id))
        if rec is not None and rec.state == StepState.SUCCEEDED and rec.output is False:
            raise NonDeterministic(
                self.run_id,
                rec.name,
                self.next_position(),
                f"ctx.deprecate_patch {change_id}",
                -1,
                f"ctx.patched {change_id} -> False",
                message=f"run {self.run_id} started on the code before patch {change_id!r} "
                "(its ctx.patched() answered False), which this code no longer has: let "
                "such runs finish before deprecating the patch (docs/workflows.md, "
                "Versioning)",
            )

    @property
    def loaded(self) -> bool:
        """The run's stored steps are known here (get() needs no round trip)."""
        return self._steps is not None

    def load(self) -> None:
        """Read the run's stored steps, once (the first get(); an async workflow's first
        durable operation calls it from a thread, so the loop never waits on it)."""
        with self._load_lock:
            if self._steps is not None:
                return
            with self.database.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
                rows = cur.execute(_sql.query("load_steps"), {"run_id": self.run_id}).fetchall()
            self.db_now = rows[0]["db_now"]
            self._steps = {
                r["name"]: StepRecord(
                    r["name"],
                    r["state"],
                    r["output"],
                    r["error"],
                    r["created_at"],
                    r["position"],
                    r["call"],
                )
                for r in rows
                if r["name"] is not None
            }

    def get(self, name: str) -> StepRecord | None:
        if self._steps is None:
            self.load()
        assert self._steps is not None
        return self._steps.get(name)

    def record(
        self,
        name: str,
        state: StepState,
        *,
        output: str | None = None,
        error: str | None = None,
        started_at: datetime | None = None,
        conn: Any = None,
        remember: bool = True,
    ) -> StepRecord:
        """Store a step (fenced by the lease; in `conn`'s transaction if given); raises
        LeaseLost if the lease is gone. Not `remember`: from another thread (a running
        step's row, _running_steps), which leaves this attempt's records alone."""
        position, call = self._positions.get(name), self._calls.get(name)
        params = {
            "run_id": self.run_id,
            "lease_token": self.lease_token,
            "name": name,
            "state": state,
            "output": output,
            "error": error,
            "attempt": self.attempt,
            "started_at": started_at,
            # a wait's spec stays in steps.waited once the output holds what it returned
            "waited": output if state == StepState.WAITING else None,
            "position": position,
            "call": call,
        }
        with self.database.connection(conn) as c:
            row = c.execute(_sql.query("record_step"), params).fetchone()
        if row is None:
            raise LeaseLost(
                f"run {self.run_id} is no longer held by this worker; "
                f"step {name!r} was not recorded"
            )
        record = StepRecord(
            name,
            state,
            None if output is None else _json.loads(output),
            error,
            row[1],
            position,
            call,
        )
        if not remember:
            return record
        self.db_now = row[2]
        assert self._steps is not None
        self._steps[name] = record
        return record

    # -- the operations ----------------------------------------------------------------

    def step(
        self,
        name: str,
        fn: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: float | None = None,
    ) -> Any:
        """A step of a sync workflow, `name` already made unique (unique_name). The async
        twin (AsyncContext.step) goes through the same memo, begin_step and the same
        records, with `fn` awaited on the loop or run in a thread."""
        done = self.check(name, step_call(fn, args, kwargs))
        if done is not None and done.state == StepState.SUCCEEDED:
            return done.output
        begun = self.begin_step(name, later=self.vouched())
        try:
            try:
                if timeout is None:
                    result = fn(*args, **kwargs)
                else:
                    result = _within(name, timeout, fn, args, kwargs)
            finally:
                begun.done()  # before the outcome: it lands after a `running` row
        except Exception as exc:
            self.step_failed(name, begun, exc)
            raise
        return self.step_succeeded(name, begun, result)

    def vouched(self) -> bool:
        """The worker knows it still holds the run: a step may start without a round
        trip (its `running` row is written later, if it runs a while)."""
        return self.holds is not None and self.holds()

    def begin_step(self, name: str, *, later: bool) -> Begun:
        """A step's body is about to run. It is visible while it runs (`pgqueue runs
        show`, the dashboard, pgqueue.steps) once it has run a while (`later`, when the
        worker vouches for the lease); otherwise its `running` row is written now, as
        the lease check it then is."""
        started = datetime.now().astimezone()
        if later:
            write = functools.partial(
                self.record, name, StepState.RUNNING, started_at=started, remember=False
            )
            return Begun(started, RUNNING_STEPS.show_later(write))
        self.record(name, StepState.RUNNING, started_at=started)
        return Begun(started, None)

    def step_failed(self, name: str, begun: Begun, exc: BaseException) -> None:
        error = f"{type(exc).__name__}: {exc}"
        self.record(name, StepState.FAILED, error=error, started_at=begun.started)

    def step_succeeded(self, name: str, begun: Begun, result: Any) -> Any:
        """Store the step's result; the value returned is the one a replay returns."""
        text = _json.dumps(
            result,
            what=f"the result of step {name!r}",
            limit=self.database.max_payload_bytes,
            max_depth=self.database.max_json_depth,
        )
        self.record(name, StepState.SUCCEEDED, output=text, started_at=begun.started)
        return _json.loads(text)

    def emit_event(
        self, name: str, event: str, key: str | None, payload: Any, delay: float | None
    ) -> int:
        """Emit an event once for this run: the event, the runs it starts for subscribed
        workflows and its step commit together, so a replay (or a retry after a crash)
        returns the stored event id and emits nothing."""
        params = _events.event_params(self.database, event, key, payload, delay)
        rec = self.check(name, call_text(f"ctx.emit_event {event}", [key]))
        if rec is not None and rec.state == StepState.SUCCEEDED:
            return int(rec.output["event_id"])
        with self.database.connection() as conn, conn.transaction():
            event_id = _events.emit_event(conn, params)
            self.enqueuer.start_subscribers(conn, event, event_id, payload)
            out = _json.dumps({"event_id": event_id}, what="emit_event")
            self.record(name, StepState.SUCCEEDED, output=out, conn=conn)  # LeaseLost: rolled back
        return event_id

    def sleep_until(self, name: str, spec: dict[str, Any]) -> None:
        # what it sleeps for is not compared: a deadline is often computed from the clock
        rec = self.check(name, call_text("ctx.sleep_until" if "until" in spec else "ctx.sleep"))
        if rec is not None and rec.state == StepState.SUCCEEDED:
            return
        if rec is None:
            rec = self.record(name, StepState.WAITING, output=_json.dumps(spec, what="sleep"))
        spec = rec.output
        wake_at = (
            datetime.fromisoformat(spec["until"])
            if "until" in spec
            else rec.created_at + timedelta(seconds=spec["seconds"])
        )
        assert self.db_now is not None
        left = (wake_at - self.db_now).total_seconds()
        if left <= 0:
            self.record(name, StepState.SUCCEEDED, output=_json.dumps(spec, what="sleep"))
            return
        raise Suspend(RunState.SCHEDULED, left, wake_at=wake_at)

    def wait_for_event(self, name: str, event: str, key: str | None, timeout: float | None) -> Any:
        check_name("event", event)
        key = check_key("event key", key)
        if timeout is not None:
            timeout = check_seconds("timeout", timeout, zero=True)
        rec = self.check(name, call_text(f"ctx.wait_for_event {event}", [key]))
        if rec is not None and rec.state == StepState.SUCCEEDED:
            return rec.output
        spec = {"event": event, "key": key, "timeout": timeout}
        if rec is None:
            rec = self.record(name, StepState.WAITING, output=_json.dumps(spec, what="wait"))
        since = rec.created_at
        with self.database.connection() as conn:
            row = conn.execute(
                _sql.query("find_event"), {"event": event, "key": key or "", "since": since}
            ).fetchone()
        if row is not None and row[1]:
            self.record(name, StepState.SUCCEEDED, output=_json.dumps(row[0], what="event payload"))
            return row[0]
        assert self.db_now is not None
        wake_at = None if timeout is None else since + timedelta(seconds=timeout)
        left = None if wake_at is None else (wake_at - self.db_now).total_seconds()
        if left is not None and left <= 0:
            self.record(name, StepState.SUCCEEDED, output="null")
            return None
        if row is not None and (left is None or row[2] < left):
            # a delayed event is on its way: wait until it is due
            left, wake_at = max(0.0, row[2]), row[3]
        raise Suspend(
            RunState.WAITING,
            left,
            wait_event=event,
            wait_key=key or "",
            wait_since=since,
            wake_at=wake_at,
        )

    def call(
        self,
        name: str,
        task: Task[Any, Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        timeout: float | None = None,
    ) -> Any:
        from pgqueue.errors import ChildFailed

        if timeout is not None:
            timeout = check_seconds("call timeout", timeout, zero=False)
        rec = self.check(name, call_text(f"ctx.call {task.name}", args, kwargs))
        if rec is not None and rec.state == StepState.SUCCEEDED:
            return rec.output
        if (
            rec is not None
            and rec.state == StepState.FAILED
            and (rec.output or {}).get("timed_out")
        ):
            raise TimeoutError(rec.error)  # as the attempt that timed out saw it
        if rec is not None and rec.state == StepState.WAITING:
            child_id = int(rec.output["run_id"])
        else:
            child_id = self._enqueue_child(name, task, args, kwargs).id
            spec = {"run_id": child_id, "timeout": timeout}
            rec = self.record(name, StepState.WAITING, output=_json.dumps(spec, what="call"))
        with self.database.connection() as conn:
            row = conn.execute(_sql.query("child_state"), {"id": child_id}).fetchone()
        if row is None:
            raise ChildMissing(child_id, self.run_id, name)
        state, result, error, child_task = row
        if state == RunState.SUCCEEDED:
            self.record(name, StepState.SUCCEEDED, output=_json.dumps(result, what="child result"))
            return result
        if state in (RunState.FAILED, RunState.CANCELED):
            self.record(name, StepState.FAILED, error=f"child run {child_id} {state}: {error}")
            raise ChildFailed(child_id, child_task, state, error)
        timeout = rec.output.get("timeout")  # as stored by the attempt that called it
        left = wake_at = None
        if timeout is not None:
            assert self.db_now is not None
            wake_at = rec.created_at + timedelta(seconds=timeout)
            left = (wake_at - self.db_now).total_seconds()
            if left <= 0:
                self._time_out_call(name, child_id, timeout)
        raise Suspend(RunState.WAITING, left, wait_run_id=child_id, wake_at=wake_at)

    def _time_out_call(self, name: str, child_id: int, timeout: float) -> None:
        """The child did not finish in time: the step fails for good (a replay raises the
        same TimeoutError), and the child is canceled, saying why."""
        message = f"child run {child_id} of step {name!r} did not finish within {timeout:g}s"
        out = _json.dumps({"run_id": child_id, "timeout": timeout, "timed_out": True}, what="call")
        reason = f"parent run {self.run_id} stopped waiting: {message}"
        with self.database.connection() as conn, conn.transaction():
            self.record(name, StepState.FAILED, output=out, error=message, conn=conn)
            conn.execute(_sql.query("cancel"), {"id": child_id, "children": True, "reason": reason})
        raise TimeoutError(message)

    def spawn(
        self, name: str, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> RunHandle:
        from pgqueue.runs.handle import RunHandle

        rec = self.check(name, call_text(f"ctx.spawn {task.name}", args, kwargs))
        if rec is not None and rec.state == StepState.SUCCEEDED:
            return RunHandle(int(rec.output["run_id"]), self.database, created=False)
        handle = self._enqueue_child(name, task, args, kwargs)
        self.record(
            name, StepState.SUCCEEDED, output=_json.dumps({"run_id": handle.id}, what="spawn")
        )
        return handle

    def _enqueue_child(
        self, name: str, task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> RunHandle:
        key = CHILD_KEY.format(parent=self.run_id, name=name)
        return task.options(idempotency_key=key, parent_id=self.run_id).enqueue(*args, **kwargs)


def _within(
    name: str, timeout: float, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """fn(*args, **kwargs) in a thread of its own (with the caller's context), waited for
    up to `timeout` seconds: TimeoutError after that. A thread cannot be stopped: a step
    that timed out is left to finish on its own, and what it returns is dropped."""
    box: list[tuple[bool, Any]] = []
    context = contextvars.copy_context()

    def body() -> None:
        try:
            box.append((True, context.run(fn, *args, **kwargs)))
        except BaseException as exc:  # handed to the workflow's thread
            box.append((False, exc))

    thread = threading.Thread(target=body, name=f"pgqueue-step-{name}", daemon=True)
    thread.start()
    thread.join(timeout)
    if not box:
        raise TimeoutError(f"step {name!r} did not finish within {timeout:g}s")
    ok, value = box[0]
    if not ok:
        raise value
    return value
