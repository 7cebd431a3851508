"""Uniqueness scopes of an enqueue (task.options(unique_key=..., unique_while=...,
unique_for=..., on_duplicate=..., debounce=...)): the options checked once, and the key of
each run. The database does the rest (sql/functions/enqueue_unique.sql): one partial unique
index holds the runs in scope, so concurrent enqueues cannot create two."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from pgqueue.enqueue.checks import check_key, check_seconds
from pgqueue.errors import InvalidArguments

SCOPES = ("queued", "active", "retained")
ON_DUPLICATE = ("skip", "replace", "cancel_running")

KeyFn = Callable[..., str | None]


@dataclass(frozen=True, slots=True)
class Uniqueness:
    """What the options say, checked: `key` is a str, or a function of the run's
    arguments (enqueue_many's per-item keys); `delay` is the debounce's (the due time is
    pushed to now + that many seconds at every enqueue); `cancel_running`: the new run
    replaces the unfinished one holding the key, which is canceled."""

    key: str | KeyFn
    scope: str
    window: float | None
    replace: bool
    delay: float | None
    cancel_running: bool = False

    def key_for(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str | None:
        key = self.key(*args, **kwargs) if callable(self.key) else self.key
        if key is not None and not isinstance(key, str):
            raise InvalidArguments(
                f"unique_key function returned {type(key).__name__}: it must return a str "
                "(or None for a run without a key)"
            )
        return check_key("unique key", key)


def from_options(
    key: str | KeyFn | None,
    scope: str | None,
    window: float | timedelta | None,
    on_duplicate: str | None,
    debounce: float | timedelta | None,
    *,
    delay: Any,
    run_at: Any,
) -> Uniqueness | None:
    """The checked uniqueness of an enqueue's options, or None when it has no unique_key
    (then the other uniqueness options must be absent too)."""
    if key is None:
        given = [
            name
            for name, value in (
                ("unique_while", scope),
                ("unique_for", window),
                ("on_duplicate", on_duplicate),
                ("debounce", debounce),
            )
            if value is not None
        ]
        if given:
            raise InvalidArguments(f"{given[0]} needs a unique_key= (the key it applies to)")
        return None
    if not (isinstance(key, str) or callable(key)):
        raise InvalidArguments(
            f"unique_key must be a str or a function of the run's arguments, "
            f"not {type(key).__name__}"
        )
    if isinstance(key, str):
        check_key("unique key", key)
    pushed: float | None = None
    if debounce is not None:
        pushed = check_seconds("debounce", debounce, zero=False)
        if scope not in (None, "queued") or on_duplicate not in (None, "replace"):
            raise InvalidArguments(
                "debounce= means unique_while='queued', on_duplicate='replace': leave those two out"
            )
        if delay is not None or run_at is not None:
            raise InvalidArguments(
                "debounce= sets the due time (now + debounce): leave delay= and run_at= out"
            )
        scope, on_duplicate = "queued", "replace"
    if on_duplicate == "cancel_running":
        _check_cancel_running(scope, window)
        scope = "active"
    scope = "queued" if scope is None else scope
    if scope not in SCOPES:
        raise InvalidArguments(
            f"unique_while must be one of {', '.join(map(repr, SCOPES))}, not {scope!r}"
        )
    on_duplicate = "skip" if on_duplicate is None else on_duplicate
    if on_duplicate not in ON_DUPLICATE:
        raise InvalidArguments(
            f"on_duplicate must be 'skip', 'replace' or 'cancel_running', not {on_duplicate!r}"
        )
    if on_duplicate == "replace" and scope != "queued":
        raise InvalidArguments(
            f"on_duplicate='replace' needs unique_while='queued' (only a run that has not "
            f"started can take new arguments), not {scope!r}"
        )
    return Uniqueness(
        key=key,
        scope=scope,
        window=None if window is None else check_seconds("unique_for", window, zero=False),
        replace=on_duplicate == "replace",
        delay=pushed,
        cancel_running=on_duplicate == "cancel_running",
    )


def _check_cancel_running(scope: str | None, window: float | timedelta | None) -> None:
    """on_duplicate='cancel_running' replaces the unfinished run: its scope is 'active'
    (a finished run is not replaced, and one that is waiting or running is)."""
    if scope not in (None, "active"):
        raise InvalidArguments(
            f"on_duplicate='cancel_running' needs unique_while='active' (the default with "
            f"it: the run it replaces is any that has not finished), not {scope!r}"
        )
    if window is not None:
        raise InvalidArguments(
            "on_duplicate='cancel_running' replaces whichever run has not finished: "
            "leave unique_for= out"
        )
