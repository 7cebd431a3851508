"""Sync task bodies in child processes (`pgqueue worker --processes N`, Celery's prefork).

The parent worker keeps everything else: it claims, renews leases, keeps permits, writes
outcomes and runs hooks, async tasks and workflows, exactly as with threads; the Executor
stays the one owner of each run's life. Only a sync task's call (validation, the task's
code, its result's encoding: attempt.attempt_in_thread) runs in a child, one run at a
time per child.

The parent and a child speak JSON, one message a line, over two pipes of their own (the
child's stdin, stdout and stderr stay the worker's: a task's prints and tracebacks show in
the worker's log). Nothing is pickled.

    parent -> child   {"op": "hello", "app": "MODULE:ATTR", "dsn": ..., "pooler": ...,
                       "worker_id": ..., "parent": PID, "log": [LEVEL, FORMAT]} (first)
                      {"op": "run", "row": [...Claimed...]}
                      {"op": "cancel"}          ctx.cancelled turns true in the child
    child -> parent   {"op": "ready", "pid": PID}
                      {"op": "done", "outcome": {...Outcome...} | null, "rss_mb": F}

A child imports the app by the path the worker was started with (`--app`, or
`Worker(app_path=...)`) and configures it with the worker's DSN and pooler, so a task's
code sees the same App as in a thread: `ctx.progress` and `ctx.database` work (the child
writes progress itself, fenced by the run's lease like any progress write), enqueueing
works. Hard limits: once an attempt is no longer ours to finish (its timeout passed, the
run was canceled or its lease lost, or the worker released it at shutdown) the child is
told (`ctx.cancelled`), and `grace` seconds later it is killed and replaced; until its
code has ended the attempt keeps its slot and its queue's permit, as a thread does.
Recycling: a child is replaced after `max_runs` runs, or when its RSS after a run is over
`max_memory_mb`. A child exits at once when its parent dies: it reads its pipe in a
thread of its own (end of file: exit), and on Linux the kernel kills it too
(PR_SET_PDEATHSIG)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import importlib
import logging
import os
import queue
import signal
import subprocess
import sys
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pgqueue import _logging
from pgqueue.db import payload as _json
from pgqueue.errors import ConfigError
from pgqueue.worker import attempt as _attempt
from pgqueue.worker._threads import DaemonThreads
from pgqueue.worker.producer import rss_mb
from pgqueue.worker.records import Claimed, Held, Outcome

if TYPE_CHECKING:
    from pgqueue.tasks.task import Task

log = logging.getLogger("pgqueue.worker")

# The largest message either side sends: a run's arguments and a result are bounded by the
# app's max_payload_bytes already (checked at enqueue, and by attempt.returned).
MESSAGE_LIMIT = 1 << 31
MESSAGE_DEPTH = 1024
READY_TIMEOUT = 120.0  # seconds the first child may take to import the app
MAX_RESPAWN_DELAY = 30.0  # between tries to start a child that keeps dying at start
EXIT_WAIT = 2.0  # seconds closed children get to exit before they are killed

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class ChildError(Exception):
    """A failure raised by task code in a child process, as the child described it (its
    type, message and traceback are in the attempt's error): what error reporters see."""


def find_app_path(app: object, tasks: Any) -> str | None:
    """`MODULE:ATTR` of `app`, found in the modules that define its tasks (not __main__,
    which a child cannot import by name); None if none holds it."""
    seen: set[str] = set()
    for task in tasks:
        name = getattr(task.fn, "__module__", None)
        if not name or name == "__main__" or name in seen:
            continue
        seen.add(name)
        module = sys.modules.get(name)
        for attr, value in vars(module).items() if module is not None else ():
            if value is app:
                return f"{name}:{attr}"
    return None


def log_setup() -> list[str] | None:
    """The root logger's level and format ("text" or "json") if this process set it up
    (the CLI's --log-level and --log-format), for the children to log the same way."""
    root = logging.getLogger()
    if not root.handlers:
        return None
    json_ = any(isinstance(h.formatter, _logging.JsonFormatter) for h in root.handlers)
    return [logging.getLevelName(root.level), "json" if json_ else "text"]


def encode(message: dict[str, Any]) -> bytes:
    text = _json.dumps(message, what="a message to a child", limit=MESSAGE_LIMIT)
    return text.encode() + b"\n"


def outcome_fields(outcome: Outcome) -> dict[str, Any]:
    """An Outcome as JSON (its exception stays in the child: its text is the error)."""
    return {
        "id": outcome.id,
        "lease_token": outcome.lease_token,
        "state": outcome.state,
        "result": outcome.result,
        "error": outcome.error,
        "error_kind": outcome.error_kind,
        "traceback": outcome.traceback,
        "delay": outcome.delay,
        "refund": outcome.refund,
        "wait_event": outcome.wait_event,
        "wait_key": outcome.wait_key,
        "wait_since": _iso(outcome.wait_since),
        "wait_run_id": outcome.wait_run_id,
        "wake_at": _iso(outcome.wake_at),
        "backoff": outcome.backoff,
    }


def outcome_from(fields: dict[str, Any]) -> Outcome:
    fields = dict(fields)
    for name in ("wait_since", "wake_at"):
        if fields[name] is not None:
            fields[name] = datetime.fromisoformat(fields[name])
    error = fields["error"]
    return Outcome(**fields, exception=None if error is None else ChildError(error))


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


# -- the parent's side ------------------------------------------------------------------


@dataclass(eq=False)
class Child:
    """One child process and its pipes, seen from the parent (on its event loop)."""

    proc: subprocess.Popen[bytes]
    to_child: int  # fd the parent writes
    from_child: int  # fd the parent reads
    pid: int
    ready: bool = False
    runs: int = 0
    held: Held | None = None  # the attempt it runs now
    reply: asyncio.Future[dict[str, Any] | None] | None = None  # None: it died
    kill_timer: asyncio.TimerHandle | None = None
    retiring: bool = False
    buffer: bytearray = field(default_factory=bytearray)

    def hand(self, held: Held, reply: asyncio.Future[dict[str, Any] | None]) -> None:
        """It runs `held` now; its reply settles `reply`."""
        self.held, self.reply = held, reply

    def finished(self) -> asyncio.Future[dict[str, Any] | None] | None:
        """Its attempt is done: the reply to settle (None if nobody waits)."""
        reply = self.reply
        self.reply = self.held = None
        self.disarm()
        self.runs += 1
        return reply

    def arm(self, timer: asyncio.TimerHandle) -> None:
        self.kill_timer = timer

    def disarm(self) -> None:
        if self.kill_timer is not None:
            self.kill_timer.cancel()
            self.kill_timer = None

    def lines(self, data: bytes) -> list[bytes]:
        """The whole lines read so far, with `data`."""
        self.buffer += data
        found = []
        while (end := self.buffer.find(b"\n")) >= 0:
            found.append(bytes(self.buffer[:end]))
            del self.buffer[: end + 1]
        return found

    def became_ready(self) -> None:
        self.ready = True

    def close_pipe(self, retiring: bool = False) -> None:
        """Close the parent's end of its pipe: at its end the child exits."""
        self.retiring = self.retiring or retiring
        if self.to_child >= 0:
            with contextlib.suppress(OSError):
                os.close(self.to_child)
            self.to_child = -1

    def send(self, message: dict[str, Any]) -> bool:
        """Write one message (its reader thread always reads, so this does not wait for
        the task); False if the child is gone."""
        data = encode(message)
        try:
            while data:
                data = data[os.write(self.to_child, data) :]
        except OSError:
            return False
        return True


class Processes:
    """A pool of `size` child processes for the sync tasks of the app at `app_path`.
    Built on the event loop it serves; `start()` before the first attempt, `close()` at
    the end. `hello` is what a child needs to configure the app (the worker's DSN and
    pooler, its id)."""

    def __init__(
        self,
        size: int,
        app_path: str,
        hello: dict[str, Any],
        grace: float,
        max_runs: int | None,
        max_memory_mb: float | None,
    ) -> None:
        self.size = size
        self.app_path = app_path
        self.hello = {"op": "hello", "app": app_path, **hello}
        self.hello["parent"] = os.getpid()
        self.hello["log"] = log_setup()
        self.grace = grace
        self.max_runs = max_runs
        self.max_memory_mb = max_memory_mb
        self.children: set[Child] = set()
        self._idle: deque[Child] = deque()
        self._waiting: deque[asyncio.Future[Child]] = deque()
        self._loop = asyncio.get_running_loop()
        self._closed = False
        self._closing: list[subprocess.Popen[bytes]] = []  # the children close() stopped
        self._failed_starts = 0  # children that died before they were ready, in a row
        self._respawn: asyncio.TimerHandle | None = None
        self._reaping: set[asyncio.Future[int]] = set()  # waits for exited children
        self._first_ready: asyncio.Future[None] = self._loop.create_future()

    @staticmethod
    def takes(task: Task[Any, Any]) -> bool:
        """Whether `task`'s attempts run in a child: sync tasks, not workflows (whose
        steps, sleeps and child runs are the parent's)."""
        return not task.is_async and not task.workflow

    def pids(self) -> list[int]:
        return sorted(c.pid for c in self.children)

    async def start(self) -> None:
        """Start the children; return once one is ready (ConfigError if the first ones
        die before: the app cannot be imported there)."""
        self._fill()
        try:
            await asyncio.wait_for(asyncio.shield(self._first_ready), READY_TIMEOUT)
        except TimeoutError:
            raise ConfigError(
                f"no child process imported {self.app_path} within {READY_TIMEOUT:g}s"
            ) from None
        log.info(
            "sync tasks run in %d child processes (%s): pids %s",
            self.size,
            self.app_path,
            ",".join(map(str, self.pids())),
        )

    async def outcome(self, held: Held, task: Task[Any, Any]) -> Outcome | None:
        """The outcome of `held`'s attempt in a child (None: write nothing), as
        attempt.attempt() gives a thread's: its timeout is a failure, its cancellation
        (Held.stop) writes nothing."""
        try:
            return await self.attempt(held, task)
        except asyncio.CancelledError:
            if held.lost or held.released:
                return None
            raise
        except _attempt.AttemptTimeout as exc:
            return _attempt.raised(held, task, exc)

    async def attempt(self, held: Held, task: Task[Any, Any]) -> Outcome | None:
        """Run `held`'s sync attempt in a child: its outcome, or None (write nothing: the
        run was canceled, lost or released, which Held.stop() tells by cancelling this
        wait). AttemptTimeout past the run's timeout (counted once a child has the run);
        in every case the child is told to stop and killed `grace` later if it has not."""
        timeout = held.row.timeout_seconds
        current = asyncio.current_task()
        held.awaiting = current  # Held.stop() cancels this wait
        try:
            child = await self._take()
            reply: asyncio.Future[dict[str, Any] | None] = self._loop.create_future()
            child.hand(held, reply)
            held.invocation = reply  # the attempt's code runs until this is done
            if child not in self.children or not child.send({"op": "run", "row": list(held.row)}):
                self._gone(child)  # it died meanwhile: the attempt fails as if under it
                if not reply.done():
                    reply.set_result(None)
            try:
                if timeout is None:
                    done = await asyncio.shield(reply)
                else:
                    done = await asyncio.wait_for(asyncio.shield(reply), timeout)
            except TimeoutError:
                self._stop(child)
                raise _attempt.AttemptTimeout(_attempt.timeout_message(timeout or 0.0)) from None
            except asyncio.CancelledError:
                self._stop(child)
                raise
        except asyncio.CancelledError:
            if (held.lost or held.released) and current is not None:
                current.uncancel()  # our own stop(): not the end of the attempt's task
            raise
        finally:
            held.awaiting = None
        if done is None:
            return self._died(held, task, child)
        fields = done.get("outcome")
        if fields is None or held.lost or held.released:
            return None
        return outcome_from(fields)

    def close(self) -> None:
        """Stop every child: each reads the end of its pipe and exits, even mid-run (its
        reader thread ends the process); closed() kills one still there EXIT_WAIT later."""
        self._closed = True
        self._closing = [c.proc for c in self.children]
        if self._respawn is not None:
            self._respawn.cancel()
        for waiter in self._waiting:
            waiter.cancel()
        for child in list(self.children):
            child.close_pipe()

    async def closed(self) -> None:
        """After close(): wait until every child has exited (killing the slow ones)."""
        procs = self._closing

        def reap() -> None:
            for proc in procs:
                try:
                    proc.wait(EXIT_WAIT)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

        await asyncio.to_thread(reap)

    # -- children ----------------------------------------------------------------------

    async def _take(self) -> Child:
        """A ready child with nothing to do (waiting for one if all are busy)."""
        while self._idle:
            child = self._idle.popleft()
            if child in self.children and not child.retiring:
                return child
        waiter: asyncio.Future[Child] = self._loop.create_future()
        self._waiting.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._free(waiter.result())  # handed over as we were cancelled
            raise

    def _free(self, child: Child) -> None:
        """`child` has nothing to do: to the first waiter, else idle."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(child)
                return
        self._idle.append(child)

    def _fill(self) -> None:
        """Start children until there are `size` (unless closed)."""
        self._respawn = None
        while not self._closed and len(self.children) < self.size:
            try:
                self.children.add(self._spawn())
            except OSError as exc:
                log.error("could not start a child process: %s", exc)
                self._retry_fill()
                return

    def _retry_fill(self) -> None:
        if self._respawn is None and not self._closed:
            delay = min(MAX_RESPAWN_DELAY, 0.5 * 2**self._failed_starts)
            self._respawn = self._loop.call_later(delay, self._fill)

    def _spawn(self) -> Child:
        """A child process (on the loop's thread: PR_SET_PDEATHSIG is tied to the thread
        that started it, and this one lives as long as the worker)."""
        down_r, down_w = os.pipe()  # parent -> child
        up_r, up_w = os.pipe()  # child -> parent
        os.set_inheritable(down_r, True)
        os.set_inheritable(up_w, True)
        # the worker's sys.path, which the child takes before it imports anything
        env = {**os.environ, PATH_ENV: _json.dumps(sys.path, what="sys.path")}
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", CHILD_MAIN, str(down_r), str(up_w)],
                stdin=subprocess.DEVNULL,
                pass_fds=(down_r, up_w),
                env=env,
            )
        except OSError:
            for fd in (down_r, down_w, up_r, up_w):
                os.close(fd)
            raise
        os.close(down_r)
        os.close(up_w)
        os.set_blocking(up_r, False)
        child = Child(proc, down_w, up_r, proc.pid)
        self._loop.add_reader(up_r, self._read, child)
        child.send(self.hello)
        return child

    def _read(self, child: Child) -> None:
        """On the loop: the child wrote something (or its end of the pipe closed)."""
        try:
            data = os.read(child.from_child, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._gone(child)
            return
        for line in child.lines(data):
            try:
                message = _json.loads(line)
            except ValueError:
                log.error("child %d sent something that is not JSON: %.200r", child.pid, line)
                continue
            self._heard(child, message)

    def _heard(self, child: Child, message: dict[str, Any]) -> None:
        op = message.get("op")
        if op == "ready":
            child.became_ready()
            self._failed_starts = 0
            if not self._first_ready.done():
                self._first_ready.set_result(None)
            self._free(child)
        elif op == "done":
            reply = child.finished()
            if reply is not None and not reply.done():
                reply.set_result(message)
            why = self._recycle_why(child, message.get("rss_mb"))
            if why is not None:
                log.info("child %d recycled: %s", child.pid, why)
                self._retire(child)
            else:
                self._free(child)

    def _recycle_why(self, child: Child, rss: Any) -> str | None:
        if self.max_runs is not None and child.runs >= self.max_runs:
            return f"{child.runs} runs (max_runs)"
        limit = self.max_memory_mb
        if limit is not None and isinstance(rss, (int, float)) and rss > limit:
            return f"RSS {rss:.0f} MiB over max_memory_mb {limit:g}"
        return None

    def _retire(self, child: Child) -> None:
        """Let an idle child go (it reads the end of its pipe and exits) and start
        another in its place."""
        child.close_pipe(retiring=True)

    def _stop(self, child: Child) -> None:
        """The attempt `child` runs is no longer ours to finish: ctx.cancelled in the
        child now, and the child killed `grace` seconds later if its code runs on."""
        held = child.held
        if held is None or child.kill_timer is not None:
            return
        child.send({"op": "cancel"})
        child.arm(self._loop.call_later(self.grace, self._kill, child, held))

    def _kill(self, child: Child, held: Held) -> None:
        if child.held is not held or child not in self.children:
            return
        log.warning(
            "run %s (%s): killing child process %d, still running %.0fs after its attempt"
            " was stopped",
            held.id,
            held.row.task,
            child.pid,
            self.grace,
        )
        with contextlib.suppress(ProcessLookupError):
            child.proc.kill()

    def _gone(self, child: Child) -> None:
        """On the loop: `child`'s pipe closed (it exited, or was killed): settle its
        attempt, reap it and start another."""
        if child not in self.children:
            return
        self.children.discard(child)
        self._loop.remove_reader(child.from_child)
        os.close(child.from_child)
        child.close_pipe()
        child.disarm()
        if not child.ready and not child.retiring:
            self._failed_starts += 1
        reaped = asyncio.ensure_future(asyncio.to_thread(child.proc.wait))
        self._reaping.add(reaped)  # the loop keeps only a weak reference to a task
        reaped.add_done_callback(self._reaping.discard)
        # its attempt (if any) is settled once it is reaped: its exit code is known then
        reaped.add_done_callback(_exit_settled(child))
        if self._closed:
            return
        if not child.ready and not self._first_ready.done() and self._failed_starts >= 3:
            self._first_ready.set_exception(
                ConfigError(
                    f"the child processes exit before they are ready: {self.app_path} "
                    "cannot be imported in a fresh process (see the child's error above)"
                )
            )
            return
        if self._failed_starts:
            self._retry_fill()
        else:
            self._fill()

    def _died(self, held: Held, task: Task[Any, Any], child: Child) -> Outcome | None:
        """The attempt whose child died under it (a crash, os._exit, the OOM killer)."""
        if held.lost or held.released:
            return None
        code = child.proc.poll()
        return _attempt.failure(
            held,
            "error",
            f"the child process {child.pid} running the task exited"
            + (f" with code {code}" if code is not None else "")
            + " before it returned",
            retry=task.retry,
            with_traceback=False,
        )


def _exit_settled(child: Child) -> Callable[[asyncio.Future[int]], None]:
    """Once an exited child is reaped: its attempt's reply (None: it died under it), and
    a log line unless it was a clean exit or our own kill."""

    def settled(done: asyncio.Future[int]) -> None:
        reply = child.reply
        if reply is not None and not reply.done():
            reply.set_result(None)
        if done.cancelled() or done.exception() is not None:
            return
        code = done.result()
        if code not in (0, -signal.SIGKILL):
            log.warning("child process %d exited with code %s", child.pid, code)

    return settled


# -- the child's side -------------------------------------------------------------------

# What a child runs (python -c CHILD_MAIN FD_IN FD_OUT): the worker's sys.path (from the
# environment), so that it imports this very pgqueue and the app as the worker did, then
# this module's child_main with its two pipes' fds.
PATH_ENV = "PGQUEUE_CHILD_SYS_PATH"
CHILD_MAIN = (
    "import json, os, sys; sys.path[:] = json.loads(os.environ.pop('PGQUEUE_CHILD_SYS_PATH')); "
    "from pgqueue.worker.processes import child_main; child_main(sys.argv[1:])"
)


def child_main(argv: list[str]) -> None:
    """A child's life: read the hello, import and configure the app, say ready, then run
    one attempt at a time until the parent closes the pipe (or dies)."""
    inbox = os.fdopen(int(argv[0]), "rb")
    outbox = os.fdopen(int(argv[1]), "wb", buffering=0)
    # The worker's own signals are the parent's: a terminal's Ctrl-C reaches the whole
    # process group, and a child must not fail its run of it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    hello = _json.loads(inbox.readline() or b"null")
    if not isinstance(hello, dict):
        return
    _die_with_parent(int(hello["parent"]))
    if hello.get("log"):
        _logging.setup(*hello["log"])
    _logging.install_run_fields()  # a task's log records carry its run's fields
    _setup_django()
    app = _load_app(str(hello["app"]))
    _configure(app, hello.get("dsn"), hello.get("pooler"))
    worker_id = uuid.UUID(hello["worker_id"])
    names = sorted(app.tasks)
    runtime = _attempt.Runtime(
        tasks=app.tasks,
        tasks_label=",".join(names[:3]) + ("..." if len(names) > 3 else ""),
        max_payload_bytes=app.max_payload_bytes,
        max_json_depth=app.max_json_depth,
        threads=DaemonThreads(1),  # unused: the child's attempt runs in its main thread
        sync_wrappers=app.sync_wrappers,
        wrap_sync=app.wrap_sync,
        traced=app,
    )
    jobs: queue.SimpleQueue[Held] = queue.SimpleQueue()
    running: list[Held] = []  # the attempt last handed over, for a cancel
    lock = threading.Lock()

    def say(message: dict[str, Any]) -> None:
        with lock:
            outbox.write(encode(message))

    def listen() -> None:
        """The child's reader thread: runs to the main thread, cancels to the running
        attempt's Context; at the end of the pipe (the parent closed it, or died), exit."""
        try:
            for line in inbox:
                message = _json.loads(line)
                if message.get("op") == "run":
                    row = Claimed(*message["row"])
                    held = Held(row.id, row.lease_token, row, app.make_context(row, worker_id))
                    running[:] = [held]
                    jobs.put(held)
                elif message.get("op") == "cancel" and running:
                    running[0].ctx.mark_cancelled()
        finally:
            os._exit(0)

    threading.Thread(target=listen, name="pgqueue-child-pipe", daemon=True).start()
    say({"op": "ready", "pid": os.getpid()})
    while True:
        held = jobs.get()
        task = runtime.tasks.get(held.row.task)
        outcome: Outcome | None
        if task is None:
            found = _attempt.checked(runtime, held, task)
            outcome = found if isinstance(found, Outcome) else None
        else:
            outcome = _attempt.attempt_in_thread(runtime, held, task)
        say(
            {
                "op": "done",
                "outcome": None if outcome is None else outcome_fields(outcome),
                "rss_mb": rss_mb(),
            }
        )


def _die_with_parent(parent: int) -> None:
    """Linux: the kernel kills this process when the parent's thread that started it
    ends (and the parent is gone already if getppid() changed)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(0)


def _setup_django() -> None:
    """In a Django project's worker (manage.py pgqueue worker, or DJANGO_SETTINGS_MODULE
    set), set Django up before the app's modules import models, as manage.py did in the
    worker: its apps, settings and pgqueue.contrib.django's wrappers around each run."""
    if not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return
    try:
        import django
    except ImportError:
        return
    django.setup()


def _load_app(spec: str) -> Any:
    """The App at MODULE:ATTR; a child with none there says so and exits 2."""
    module_name, _, attr = spec.partition(":")
    module = importlib.import_module(module_name)
    app = getattr(module, attr, None)
    if not hasattr(app, "make_context") or not hasattr(app, "tasks"):
        print(
            f"pgqueue child process: {attr!r} in {module_name} is not a pgqueue.App "
            f"(found {type(app).__name__})",
            file=sys.stderr,
        )
        sys.exit(2)
    return app


def _configure(app: Any, dsn: str | None, pooler: str | None) -> None:
    """The child's app as the worker's: same DSN and pooler."""
    if dsn and (not app.has_own_dsn or app.dsn != dsn):
        app.configure(dsn=dsn)
    if pooler is not None and app.pooler != pooler:
        app.configure(pooler=pooler)
