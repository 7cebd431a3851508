"""DBOS's side of bench.compare: the workflows and the application process, as DBOS's
docs show (`DBOS(config=...)`, `@DBOS.workflow()`, `DBOS.register_queue(name)` at its
defaults, `DBOS.launch()`); the benchmark enqueues with `DBOSClient.enqueue_async`."""

from __future__ import annotations

import os
import signal
import threading

from bench.pingback import DSN_ENV, QUEUE, chain_link, ping_back


def main() -> None:
    from dbos import DBOS

    DBOS(config={"name": "cmp", "system_database_url": os.environ[DSN_ENV]})

    @DBOS.workflow(name="noop")
    async def noop(i: int = 0) -> None:
        """No-op."""

    @DBOS.workflow(name="ping")
    async def ping(i: int = 0) -> None:
        ping_back(i)

    @DBOS.workflow(name="chain")
    async def chain(i: int = 0, step: int = 0) -> None:
        if chain_link(i, step):
            await queue.enqueue_async(chain, i, step + 1)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    DBOS.launch()
    queue = DBOS.register_queue(QUEUE)  # it persists its configuration: after launch
    stop.wait()
    DBOS.destroy()


if __name__ == "__main__":
    main()
