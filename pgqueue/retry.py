"""The one retry policy: exponential backoff with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


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
        if self.base < 0 or self.factor < 1 or self.max_delay < 0 or not 0 <= self.jitter <= 1:
            raise ValueError(
                "RetryPolicy needs base >= 0, factor >= 1, max_delay >= 0, 0 <= jitter <= 1"
            )

    def delay(self, attempt: int) -> float:
        raw = min(self.max_delay, self.base * self.factor ** max(0, attempt - 1))
        spread = raw * self.jitter
        return max(0.0, raw + random.uniform(-spread, spread))


DEFAULT_RETRY = RetryPolicy()
