from __future__ import annotations

import pgqueue


def test_enqueue_and_burst_worker(app: pgqueue.App) -> None:
    @app.task
    def add(a: int, b: int) -> int:
        return a + b

    handle = add.enqueue(2, 3)
    app.worker(install_signal_handlers=False).run(burst=True)
    assert handle.wait(timeout=5) == 5
    run = app.get_run(handle.id)
    assert (run.state, run.attempt) == ("succeeded", 1)
