"""The rows an enqueue inserts: per-enqueue options, one run's row, and the batch of an
enqueue_many call, built from a task's arguments and defaults (pgqueue.tasks) and sent by
pgqueue.enqueue.inserts."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, TypedDict, overload

import psycopg

from pgqueue.db import payload as _json
from pgqueue.enqueue import unique as _unique
from pgqueue.enqueue.checks import (
    check_after,
    check_due,
    check_key,
    check_max_attempts,
    check_name,
    check_priority,
    check_seconds,
)
from pgqueue.errors import InvalidArguments

if TYPE_CHECKING:
    from pgqueue.db.database import Database
    from pgqueue.tasks.task import GroupFn, Task


class EnqueueKeywords(TypedDict, total=False):
    """The keywords of `Task.options(...)` (EnqueueOptions' fields, each optional), for
    type checkers: a misspelt option or a value of the wrong type is a type error."""

    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None
    queue: str | None
    priority: int | None
    delay: float | timedelta | None
    run_at: datetime | None
    max_attempts: int | None
    timeout: float | None
    idempotency_key: str | None
    group: str | None
    parent_id: int | None
    unique_key: str | Callable[..., str | None] | None
    unique_while: str | None
    unique_for: float | timedelta | None
    on_duplicate: str | None
    debounce: float | timedelta | None
    # RunHandles or run ids (or a function of a run's arguments giving them)
    after: Sequence[Any] | Callable[..., Sequence[Any] | None] | None
    on_dependency_failure: Literal["cancel", "run"] | None


@dataclass(frozen=True)
class EnqueueOptions:
    """Per-enqueue overrides (see Task.options). None means: the task's default.
    `conn`: a psycopg Connection to join with enqueue(), an AsyncConnection with
    enqueue_async()."""

    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any] | None = None
    queue: str | None = None
    priority: int | None = None
    delay: float | timedelta | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    idempotency_key: str | None = None
    group: str | None = None
    parent_id: int | None = None
    # uniqueness scopes (pgqueue.enqueue.unique, docs/flow_control.md): a str, or a function of
    # the run's arguments returning one (enqueue_many's per-item keys)
    unique_key: str | Callable[..., str | None] | None = None
    unique_while: str | None = None
    unique_for: float | timedelta | None = None
    on_duplicate: str | None = None
    debounce: float | timedelta | None = None
    # dependencies (docs/flow_control.md): the runs (RunHandles or ids) this one waits for,
    # or a function of the run's arguments returning them (enqueue_many's per-item lists)
    after: Sequence[Any] | Callable[..., Sequence[Any] | None] | None = None
    on_dependency_failure: str | None = None

    @property
    def sync_conn(self) -> psycopg.Connection[Any] | None:
        if isinstance(self.conn, psycopg.AsyncConnection):
            raise TypeError("conn= is a psycopg.AsyncConnection: use enqueue_async()")
        return self.conn

    @property
    def async_conn(self) -> psycopg.AsyncConnection[Any] | None:
        if isinstance(self.conn, psycopg.Connection):
            raise TypeError(
                "conn= is a sync psycopg.Connection: use enqueue(), not enqueue_async()"
            )
        return self.conn


@dataclass(slots=True)
class RunRow:
    """One run ready for the enqueue statement (arguments already JSON). Not changed once
    built; not frozen, because a frozen dataclass's __init__ sets each of its 16 fields
    through object.__setattr__: 1.9 us a row against 0.6, on every enqueue()."""

    task: str
    queue: str
    priority: int
    args: str
    kwargs: str
    max_attempts: int
    timeout_seconds: float | None
    group_key: str | None
    idempotency_key: str | None
    run_at: datetime | None
    delay: float | None
    parent_id: int | None
    unique_key: str | None = None
    unique_while: str | None = None
    unique_for: float | None = None
    replace: bool = False
    # the run ids it waits for, sorted, each once (None: none), and what a failed one does
    after: tuple[int, ...] | None = None
    on_dependency_failure: str | None = None
    # on_duplicate="cancel_running": the unfinished run holding the key is canceled
    cancel_running: bool = False


class RunBatch(Sequence[RunRow]):
    """The runs of one enqueue_many call: one task, one set of options. It holds what the
    enqueue statement reads: `document`, the JSON text of one array per run, the start of
    its encoding (pgqueue.enqueue.encoding) that varies per run ([args, kwargs], plus the
    group when the task's group is a function of the arguments), and `shared`, a RunRow of
    the values all its runs share (its args and kwargs unused), encoded once.
    The arguments are encoded once, for the whole batch, with one encoder call (per
    chunk of CHUNK runs). A RunRow per run is made only for code that asks for one
    (pgqueue.testing.eager); Enqueuer.insert_runs sends the document as it is."""

    CHUNK = 1000

    def __init__(
        self, shared: RunRow, elements: list[list[Any]], document: str, plain: bool = False
    ) -> None:
        self.shared = shared
        self.elements = elements
        self.document = document
        # every element is [args, kwargs]: no group per run
        self.plain = plain

    @classmethod
    def build(
        cls,
        task: Task[Any, Any],
        opts: EnqueueOptions,
        items: Iterable[Sequence[Any] | Mapping[str, Any]],
    ) -> RunBatch:
        if opts.idempotency_key is not None:
            raise ValueError("enqueue_many cannot share one idempotency_key across runs")
        if isinstance(opts.unique_key, str):
            raise ValueError(
                "enqueue_many cannot share one unique_key across runs: pass a function of "
                "the run's arguments (unique_key=lambda user_id: f'reindex:{user_id}')"
            )
        group_fn: GroupFn | None = None
        group = opts.group
        if group is None:
            if callable(task.group):
                group_fn = task.group
            else:
                group = task.group
        shared = build_row(
            task.enqueuer.database,
            task.name,
            (),
            {},
            opts,
            queue=task.queue,
            priority=task.priority,
            max_attempts=task.max_attempts,
            timeout=task.timeout,
            group=group,
        )
        elements: list[list[Any]] = []
        validate, append = task.validate, elements.append
        empty: dict[str, Any] = {}
        args: Sequence[Any]
        kwargs: Mapping[str, Any]
        # positional counts that need no check at all (no validator, no required
        # keyword-only parameter): the common item skips the call to validate
        arity = task.arity
        lo, hi = arity.min_args, arity.max_args
        if task.validator is not None or arity.required_kwonly:
            lo, hi = 1, 0
        for item in items:
            if isinstance(item, (list, tuple)):
                if group_fn is None and lo <= len(item) <= hi:
                    append([item, empty])
                    continue
                args, kwargs = item, empty
            elif isinstance(item, Mapping):
                args, kwargs = (), item if isinstance(item, dict) else dict(item)
            else:
                raise TypeError(
                    f"enqueue_many items must be an args tuple/list or a kwargs dict, "
                    f"not {type(item).__name__}"
                )
            validate(args, kwargs)
            if group_fn is None:
                append([args, kwargs])
            else:
                append([args, kwargs, check_key("group key", group_fn(*args, **kwargs))])
        what = f"arguments of task {task.name!r}"
        document = _encode(elements, what, task.enqueuer.database, cls.CHUNK)
        return cls(shared, elements, document, plain=group_fn is None)

    def __len__(self) -> int:
        return len(self.elements)

    @overload
    def __getitem__(self, index: int) -> RunRow: ...

    @overload
    def __getitem__(self, index: slice) -> list[RunRow]: ...

    def __getitem__(self, index: int | slice) -> RunRow | list[RunRow]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        args, kwargs, *group = self.elements[index]
        return replace(
            self.shared,
            args=_json.dumps(list(args), what="arguments"),
            kwargs=_json.dumps(kwargs, what="arguments"),
            group_key=group[0] if group else self.shared.group_key,
        )


def _encode(elements: list[list[Any]], what: str, database: Database, chunk: int) -> str:
    """The JSON array of `elements` ([args, kwargs, ...] per run), encoded a chunk at a
    time. A chunk within `limit` bytes holds no run over it; only a larger chunk is
    checked run by run, which raises the PayloadTooLarge of a single enqueue. Arguments
    nest two levels below the chunk's document, whose depth limit is theirs plus two; a
    chunk refused for its depth (or its encoding) is checked run by run too, for the
    error of the run at fault."""
    limit, depth = database.max_payload_bytes, database.max_json_depth
    parts = []
    for start in range(0, len(elements), chunk):
        part = elements[start : start + chunk]
        try:
            text = _json.dumps(part, what=what, limit=sys.maxsize, max_depth=depth + 2)
            oversized = (len(text) if text.isascii() else len(text.encode())) > limit
        except InvalidArguments:
            text, oversized = "", True
        if oversized:
            for args, kwargs, *_ in part:
                _json.dumps(list(args), what=what, limit=limit, max_depth=depth)
                _json.dumps(kwargs, what=what, limit=limit, max_depth=depth)
        if not text:  # no run alone is at fault: the chunk's own error
            _json.dumps(part, what=what, limit=sys.maxsize, max_depth=depth + 2)
        parts.append(text)
    if len(parts) == 1:
        return parts[0]
    return "[" + ",".join(p[1:-1] for p in parts) + "]"


def build_row(
    database: Database,
    task: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    opts: EnqueueOptions,
    *,
    queue: str,
    priority: int = 0,
    max_attempts: int = 3,
    timeout: float | None = None,
    group: str | None = None,
) -> RunRow:
    """A run row from arguments, per-enqueue options and the task's defaults (checked
    when the task was registered: only the options are checked here)."""
    what = f"arguments of task {task!r}"
    delay = None if opts.delay is None else check_seconds("delay", opts.delay, zero=True)
    run_at = None if opts.run_at is None else check_due("run_at", opts.run_at)
    limit, depth = database.max_payload_bytes, database.max_json_depth
    # None is tested here: most runs have no keys, and a call costs more than the test
    group_key = opts.group if opts.group is not None else group
    if group_key is not None:
        group_key = check_key("group key", group_key)
    idempotency_key = opts.idempotency_key
    if idempotency_key is not None:
        idempotency_key = check_key("idempotency key", idempotency_key)
    uniq = None
    if (
        opts.unique_key is not None
        or opts.unique_while is not None
        or opts.unique_for is not None
        or opts.on_duplicate is not None
        or opts.debounce is not None
    ):
        uniq = _unique.from_options(
            opts.unique_key,
            opts.unique_while,
            opts.unique_for,
            opts.on_duplicate,
            opts.debounce,
            delay=opts.delay,
            run_at=opts.run_at,
        )
    if uniq is not None and uniq.delay is not None:
        delay = uniq.delay
    if uniq is not None and uniq.cancel_running and idempotency_key is not None:
        raise InvalidArguments(
            "on_duplicate='cancel_running' always creates a run, which an idempotency_key "
            "would not: leave one of them out"
        )
    after, on_failure = None, None
    if opts.after is None and opts.on_dependency_failure is not None:
        raise InvalidArguments("on_dependency_failure needs after= (the runs it applies to)")
    if opts.after is not None:
        given = opts.after(*args, **kwargs) if callable(opts.after) else opts.after
        after = check_after(given, opts.on_dependency_failure)
        on_failure = None if after is None else opts.on_dependency_failure
        if after is not None and uniq is not None and uniq.scope == "queued":
            raise InvalidArguments(
                "after= with a unique_key needs unique_while='active' or 'retained': a run "
                "waiting for its dependencies has not been queued yet, so the 'queued' "
                "scope (and debounce=, on_duplicate='replace') cannot hold it"
            )
    return RunRow(
        task=task,
        queue=check_name("queue", opts.queue or queue),
        priority=priority if opts.priority is None else check_priority(opts.priority),
        args=_json.dumps(list(args), what=what, limit=limit, max_depth=depth),
        kwargs="{}"
        if not kwargs
        else _json.dumps(dict(kwargs), what=what, limit=limit, max_depth=depth),
        max_attempts=(
            max_attempts if opts.max_attempts is None else check_max_attempts(opts.max_attempts)
        ),
        timeout_seconds=(
            timeout if opts.timeout is None else check_seconds("timeout", opts.timeout, zero=False)
        ),
        group_key=group_key,
        idempotency_key=idempotency_key,
        run_at=run_at,
        delay=delay,
        parent_id=opts.parent_id,
        unique_key=None if uniq is None else uniq.key_for(args, kwargs),
        unique_while=None if uniq is None else uniq.scope,
        unique_for=None if uniq is None else uniq.window,
        replace=False if uniq is None else uniq.replace,
        after=after,
        on_dependency_failure=on_failure,
        cancel_running=False if uniq is None else uniq.cancel_running,
    )
