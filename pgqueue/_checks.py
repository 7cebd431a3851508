"""The checks every value passes before it is stored: names, keys, priorities, attempts,
delays and timeouts, each refused with a one-line UserError (InvalidArguments for a value of
the wrong kind, OutOfRange for one outside what its column or the clock can hold). The
Python API, the CLI and workflows call them; pgqueue.enqueue() in SQL applies the same
limits (sql/functions/enqueue.sql)."""

from __future__ import annotations

from datetime import timedelta

from pgqueue.errors import InvalidArguments, OutOfRange, UserError

MAX_NAME_LENGTH = 200
# Group, idempotency and event keys: refused above this many bytes (see check_key).
MAX_KEY_BYTES = 512
MAX_REASON_BYTES = 1000  # a cancel reason (pgqueue.cancel() checks it too)
# The columns' ranges: runs.priority is a smallint, runs.max_attempts an integer.
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767
MAX_ATTEMPTS_MAX = 2**31 - 1
# Delays and timeouts: beyond this, now() + delay overflows sooner or later, and nobody
# means it. (A NaN fails both comparisons in check_seconds: refused too.)
MAX_SECONDS = 100 * 365 * 86400


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
    """A group, idempotency or event key (None: none) of at most `limit` bytes in UTF-8.
    Longer keys would not fit the indexes that hold them (a btree entry has at most 2,704
    bytes), and fail with a server error far from their enqueue."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidArguments(f"{what} must be a string, not {type(key).__name__}")
    check_text(what, key)
    if len(key) > limit // 4 and len(key.encode()) > limit:
        raise InvalidArguments(
            f"{what} is {len(key.encode()):,} bytes in UTF-8, over the {limit}-byte limit: "
            "use a shorter key (a hash of a long one, for example)"
        )
    return key


def check_priority(priority: int) -> int:
    if not isinstance(priority, int):
        raise InvalidArguments(f"priority must be an int, not {type(priority).__name__}")
    if not PRIORITY_MIN <= priority <= PRIORITY_MAX:
        raise OutOfRange(
            f"priority must be between {PRIORITY_MIN} and {PRIORITY_MAX} (lower runs first), "
            f"not {priority}"
        )
    return priority


def check_max_attempts(max_attempts: int) -> int:
    if not isinstance(max_attempts, int):
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
    if not isinstance(seconds, (int, float)):
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
