"""The one retry policy: exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pgqueue.errors import MAX_SECONDS


@dataclass(frozen=True)
class RetryPolicy:
    """Delay before attempt n+1 after attempt n failed: base * factor**(n-1), capped at
    `max_delay`, then spread by +/- `jitter` (a fraction) so retries of many runs that
    failed together do not return together."""

    base: float = 2.0
    factor: float = 2.0
    max_delay: float = 3600.0
    jitter: float = 0.25

    def __post_init__(self) -> None:
        # (NaN fails every comparison: refused too)
        if not (
            0 <= self.base <= MAX_SECONDS
            and 1 <= self.factor <= MAX_SECONDS
            and 0 <= self.max_delay <= MAX_SECONDS
            and 0 <= self.jitter <= 1
        ):
            raise ValueError(
                "RetryPolicy needs 0 <= base, 1 <= factor, 0 <= max_delay (each at most "
                f"{MAX_SECONDS:,}, 100 years, so that a due time stays storable) and "
                "0 <= jitter <= 1"
            )

    def delay(self, attempt: int) -> float:
        try:
            grown = self.base * self.factor ** max(0, attempt - 1)
        except OverflowError:  # a late attempt of a steep policy: past any max_delay
            grown = self.max_delay
        raw = min(self.max_delay, grown)
        spread = raw * self.jitter
        return max(0.0, raw + random.uniform(-spread, spread))


DEFAULT_RETRY = RetryPolicy()
