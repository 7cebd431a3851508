"""The garbage collector settings a worker process runs under (`pgqueue worker` applies
them; `--no-tune-gc` keeps Python's).

Every run a worker holds keeps a handful of container objects alive until its outcome is
written (row, context, attempt task, outcome), so with hundreds of runs in flight many of
them outlive a young collection (every 700 allocations by default) and are promoted. The
oldest generation then grows by a quarter of what start-up left in it (modules, classes,
the app: over 100,000 objects) every few thousand runs, and each time CPython walks all
of it. Freezing what exists at start-up takes it out of those walks, and a young
generation of 10,000 lets most of a run's objects die young: 10-20% less worker CPU per
no-op run (bench/RESULTS.md, "Decisions the measurements settled").
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
    """Within the block: objects that exist on entry are frozen (never walked by the
    collector again) and the young generation is collected every YOUNG_THRESHOLD
    allocations. Both are restored on exit."""
    before = gc.get_threshold()
    gc.collect()  # what is garbage now should not be frozen with the rest
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()
