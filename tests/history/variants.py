"""Deliberately broken variants of pgqueue's statements: proof that the history checker
can fail. Test-only. A worker process of the chaos suite imports tests.chaos.app, which
calls `install_from_env()`: with PGQUEUE_HISTORY_BREAK set to a variant's name, every
later `pgqueue.db.sql.query(name)` of the statement it breaks returns the broken text.

Each variant is made from the statement's current text, and fails loudly if that text no
longer has the shape it removes (a variant that silently changed nothing would prove
nothing).

- no-fence (complete.sql): no lease check; an outcome is written whatever lease the run
  has, or none.
- early-permit (hold_zombie_permit.sql): a timed-out attempt's permit goes with its
  outcome, while its body still runs.
- no-skip-locked (claim.sql): the claim locks nothing while it picks, and updates by id:
  two workers can claim one run.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import LiteralString, cast

from pgqueue.db import sql as _sql

ENV = "PGQUEUE_HISTORY_BREAK"


def _replace(text: str, old: str, new: str) -> str:
    if old not in text:
        raise AssertionError(f"broken variant: {old!r} is no longer in the statement")
    return text.replace(old, new)


def no_fence(text: str) -> str:
    """complete.sql without its lease checks (token and expiry), in both paths."""
    text = _replace(
        text,
        "AND r.lease_token = (%(tokens)s::jsonb ->> r.id::text)::uuid",
        # the plain path still writes only the plain successes
        "AND r.id = ANY(%(succeeded)s::bigint[])",
    )
    text = _replace(text, "AND r.lease_token = o.lease_token", "")
    return _replace(text, "AND r.lease_expires_at > now()", "")


def early_permit(text: str) -> str:
    """hold_zombie_permit.sql that files nothing."""
    _replace(text, "INSERT INTO pgqueue.zombie_permits", "")
    return "SELECT %(lease_token)s::uuid WHERE false"


def no_skip_locked(text: str) -> str:
    """claim.sql picking runs without locking them, and updating them by id: two claims
    that picked one run both update it (the second after the first commits: its WHERE,
    re-checked on the new version, still matches by id)."""
    text = _replace(text, "FOR UPDATE SKIP LOCKED", "")
    return _replace(text, "ctid", "id")


VARIANTS: dict[str, tuple[str, Callable[[str], str]]] = {
    "no-fence": ("complete", no_fence),
    "early-permit": ("hold_zombie_permit", early_permit),
    "no-skip-locked": ("claim", no_skip_locked),
}


def install(variant: str) -> None:
    """From now on in this process, `pgqueue.db.sql.query` returns `variant`'s text for
    the statement it breaks."""
    name, breaker = VARIANTS[variant]
    original = _sql.query
    broken = breaker(original(name))

    def query(wanted: str) -> LiteralString:
        return cast(LiteralString, broken) if wanted == name else original(wanted)  # type: ignore[redundant-cast]

    _sql.query = query  # type: ignore[assignment]


def install_from_env() -> str | None:
    variant = os.environ.get(ENV)
    if variant:
        install(variant)
    return variant
