"""Rate limits as users write them ("100/m": at most 100 starts in any minute) and as
pgqueue.queues stores them (rate_limit, rate_period in seconds). The claim enforces them
(sql/functions/claim_limited.sql); docs/flow_control.md says how."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pgqueue.errors import InvalidArguments, OutOfRange

PERIODS = {"s": 1, "m": 60, "h": 3600}
UNITS = {seconds: unit for unit, seconds in PERIODS.items()}
PERIOD_WORDS = {1: "second", 60: "minute", 3600: "hour"}
RATE_MAX = 2**31 - 1  # pgqueue.queues.rate_limit is an integer
_FORM = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")


class Keep:
    """The default of App.set_limits' flow arguments: keep what pgqueue.queues holds."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP = Keep()


@dataclass(frozen=True)
class Rate:
    limit: int  # starts at most ...
    period: int  # ... in any interval of this many seconds

    def __str__(self) -> str:
        return f"{self.limit}/{UNITS[self.period]}"


def parse_rate(what: str, text: str | None) -> Rate | None:
    """The Rate of "N/s", "N/m" or "N/h" (None: no limit), or a one-line error naming
    `what` (e.g. "queue 'api': rate_limit")."""
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidArguments(
            f"{what} must be a string like '100/m' (N/s, N/m or N/h), not {type(text).__name__}"
        )
    match = _FORM.fullmatch(text)
    if match is None:
        raise InvalidArguments(
            f"{what} must look like N/s, N/m or N/h (e.g. '100/m'), not {text!r}"
        )
    limit = int(match.group(1))
    if not 1 <= limit <= RATE_MAX:
        raise OutOfRange(f"{what}: N must be 1 to {RATE_MAX}, not {limit} (in {text!r})")
    return Rate(limit, PERIODS[match.group(2)])


def rate_params(prefix: str, rate: Rate | None) -> dict[str, int | None]:
    """The SQL parameters of a rate: {prefix}_limit and {prefix}_period, None for none."""
    return {
        f"{prefix}_limit": rate.limit if rate else None,
        f"{prefix}_period": rate.period if rate else None,
    }
