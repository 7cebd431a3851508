"""The checks every value passes before it is stored: names, keys, priorities, attempts,
delays, timeouts and due times, each refused with a one-line UserError (InvalidArguments
for a value of the wrong kind, OutOfRange for one outside what its column or the clock
can hold). The Python API, the CLI and workflows call them; pgqueue.enqueue() in SQL
applies the same limits (sql/functions/enqueue.sql)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from pgqueue.errors import MAX_SECONDS, InvalidArguments, OutOfRange, UserError

MAX_NAME_LENGTH = 200
# Group, idempotency and event keys: refused above this many bytes (see check_key).
MAX_KEY_BYTES = 512
MAX_REASON_BYTES = 1000  # a cancel reason (pgqueue.cancel() checks it too)
# The columns' ranges: runs.priority is a smallint, runs.max_attempts an integer.
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767
MAX_ATTEMPTS_MAX = 2**31 - 1
# Delays and timeouts: at most MAX_SECONDS (pgqueue.errors). A NaN fails both comparisons
# in check_seconds: refused too.
# Due times (run_at, sleep_until, a wait's deadline, an event's delivery): finite, and
# within these two instants, inclusive. Python's datetime holds years 1 to 9999, and a
# server answers a timestamptz in its own TimeZone, up to 16 hours either way of UTC:
# the latest instant is the one that stays in year 9999 east of UTC (and is what
# complete.sql stores for a wait without deadline). A time before 1970 is long past,
# which "due now" already says, and the dates of the Julian calendar and BC never come
# near. The database holds the same bounds: pgqueue.check_due() and the CHECK
# constraints of migration 0022.
EARLIEST_DUE = datetime(1970, 1, 1, tzinfo=UTC)
LATEST_DUE = datetime(9999, 12, 31, tzinfo=UTC)


class ValidationError(UserError, ValueError):
    """A task's validator rejected its arguments."""


def check_name(kind: str, name: str) -> str:
    """A task, queue or event name: 1 to MAX_NAME_LENGTH characters PostgreSQL can store."""
    if not isinstance(name, str):
        raise InvalidArguments(f"{kind} name must be a string, not {type(name).__name__}")
    if not name or len(name) > MAX_NAME_LENGTH:
        raise OutOfRange(
            f"{kind} name must be 1 to {MAX_NAME_LENGTH} characters long, not {len(name):,}"
        )
    check_text(f"{kind} name", name)
    return name


def check_text(what: str, text: str) -> None:
    """Raise InvalidArguments if PostgreSQL cannot store `text`: a NUL character, or a lone
    surrogate (which UTF-8 cannot encode)."""
    if "\x00" in text:
        raise InvalidArguments(
            f"{what} must not contain a NUL character (\\x00): PostgreSQL cannot store it"
        )
    if not text.isascii():
        try:
            text.encode()
        except UnicodeEncodeError as exc:
            raise InvalidArguments(
                f"{what} must be valid Unicode: {text[exc.start]!r} at position {exc.start} "
                "is a lone surrogate, which UTF-8 cannot encode"
            ) from None


def check_key(what: str, key: str | None, limit: int = MAX_KEY_BYTES) -> str | None:
    """A group, idempotency, unique or event key (None: none) of at most `limit` bytes in
    UTF-8, in Unicode normal form NFC: the key to store and compare. Longer keys would not
    fit the indexes that hold them (a btree entry has at most 2,704 bytes), and fail with
    a server error far from their enqueue. Keys compare byte for byte in the database, so
    "é" typed as one code point and as "e" plus a combining accent would otherwise be two
    keys; pgqueue.nfc() gives keys given in SQL the same form."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidArguments(f"{what} must be a string, not {type(key).__name__}")
    check_text(what, key)
    if not key.isascii() and not unicodedata.is_normalized("NFC", key):
        key = unicodedata.normalize("NFC", key)
    if len(key) > limit // 4 and len(key.encode()) > limit:
        raise InvalidArguments(
            f"{what} is {len(key.encode()):,} bytes in UTF-8, over the {limit}-byte limit: "
            "use a shorter key (a hash of a long one, for example)"
        )
    return key


def check_priority(priority: int) -> int:
    if not isinstance(priority, int) or isinstance(priority, bool):
        raise InvalidArguments(f"priority must be an int, not {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise OutOfRange(
            f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX} (lower runs first), "
            f"not {priority}"
        )
    return priority


def check_max_attempts(max_attempts: int) -> int:
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool):
        raise InvalidArguments(f"max_attempts must be an int, not {type(max_attempts).__name__}")
    if not 1 <= max_attempts <= MAX_ATTEMPTS_MAX:
        raise OutOfRange(
            f"max_attempts must be between 1 and {MAX_ATTEMPTS_MAX}, not {max_attempts}"
        )
    return max_attempts


def check_seconds(what: str, seconds: float | timedelta, *, zero: bool) -> float:
    """A timeout (`zero=False`: more than 0) or a delay (`zero=True`: 0 or more), in
    seconds, finite and at most MAX_SECONDS."""
    if isinstance(seconds, timedelta):
        seconds = seconds.total_seconds()
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool):
        raise InvalidArguments(f"{what} must be a number of seconds, not {type(seconds).__name__}")
    try:
        value = float(seconds)
    except OverflowError:  # an int too large for a float
        value = float("inf")
    in_range = value >= 0 if zero else value > 0
    if not (in_range and value <= MAX_SECONDS):
        low = "0 or more" if zero else "more than 0"
        raise OutOfRange(
            f"{what} must be {low} seconds and at most {MAX_SECONDS:,} (100 years), not {value:g}"
        )
    return value


def check_due(what: str, when: datetime) -> datetime:
    """A due time: a timezone-aware datetime from EARLIEST_DUE to LATEST_DUE."""
    if not isinstance(when, datetime):
        raise InvalidArguments(f"{what} must be a datetime, not {type(when).__name__}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise OutOfRange(
            f"{what} must be timezone-aware (e.g. datetime.now(timezone.utc)), not {when}"
        )
    try:
        in_range = EARLIEST_DUE <= when <= LATEST_DUE
    except OverflowError:  # an offset that takes it past year 1 or 9999 in UTC
        in_range = False
    if not in_range:
        raise OutOfRange(
            f"{what} must be from {EARLIEST_DUE:%Y-%m-%d} to {LATEST_DUE:%Y-%m-%d} "
            f"00:00 UTC, not {when.isoformat()}"
        )
    return when


DEPENDENCY_POLICIES = ("cancel", "run")
MAX_DEPENDENCIES = 10_000  # per run: a list beyond is surely a mistake


def check_after(after: Any, on_failure: str | None) -> tuple[int, ...] | None:
    """The runs a run waits for (`after=`: RunHandles or run ids), as their ids sorted,
    each once; None for none (None or an empty list). `on_failure` is
    `on_dependency_failure=`: "cancel" (None: the default) or "run"."""
    from pgqueue.runs.handle import RunHandle

    if on_failure is not None and on_failure not in DEPENDENCY_POLICIES:
        raise InvalidArguments(
            f"on_dependency_failure must be 'cancel' or 'run', not {on_failure!r}"
        )
    if after is None:
        return None
    if isinstance(after, (str, bytes, RunHandle, int)) or not isinstance(after, Iterable):
        raise InvalidArguments(
            "after= must be a list of RunHandles or run ids (after=[h1, h2]), "
            f"not {type(after).__name__}"
        )
    ids: set[int] = set()
    for item in after:
        run_id = item.id if isinstance(item, RunHandle) else item
        if type(run_id) is not int:
            raise InvalidArguments(
                f"after= holds RunHandles or run ids (int), not {type(item).__name__}"
            )
        if not -(2**63) <= run_id < 2**63:  # (pgqueue.testing.eager's runs are negative)
            raise OutOfRange(f"after= holds run ids, which are 64-bit integers, not {run_id}")
        ids.add(run_id)
    if len(ids) > MAX_DEPENDENCIES:
        raise OutOfRange(f"a run may wait for at most {MAX_DEPENDENCIES:,} runs, not {len(ids):,}")
    return tuple(sorted(ids)) or None
