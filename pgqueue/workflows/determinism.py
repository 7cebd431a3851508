"""What a durable operation was called as, for the determinism check (Durable.check).

A call is written `<what> args#<hash>`: `what` is the step function's qualified name
(`module.qualname`), or the operation and what it names (`ctx.call <task>`,
`ctx.wait_for_event <event>`); the hash is of the arguments as JSON (sorted keys). An
argument that is not JSON counts by its type alone (a Context, a connection, a client
passed to a step): its state is not the code's to replay, and its repr may hold an
address that differs on every replay. Only what can be compared across processes is
hashed, so a call written by one worker compares equal to the same call on another.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

HASH_CHARS = 12  # of the sha256 hex digest: enough to tell two calls apart, short to read


def step_call(fn: Callable[..., Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    """The call of `ctx.step(name, fn, *args, **kwargs)` (a partial's own arguments
    count as the call's)."""
    while isinstance(fn, functools.partial):
        args, kwargs = [*fn.args, *args], {**fn.keywords, **kwargs}
        fn = fn.func
    return call_text(qualified_name(fn), args, kwargs)


def call_text(what: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None) -> str:
    return f"{what} args#{arguments_hash(args, kwargs or {})}"


def qualified_name(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or type(fn).__module__
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    return f"{module}.{name}"


def arguments_hash(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    try:
        text = json.dumps([list(args), dict(kwargs)], sort_keys=True, default=_by_type)
    except (TypeError, ValueError):  # keys of mixed types, a cycle: the types alone
        text = json.dumps([[_by_type(a) for a in args], sorted(kwargs)])
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]


def _by_type(value: Any) -> str:
    kind = type(value)
    return f"<{kind.__module__}.{kind.__qualname__}>"
