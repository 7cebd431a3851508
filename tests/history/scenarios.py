"""Short chaos scenarios whose verdict is the history checker's (tests.chaos.harness runs
them: three `pgqueue worker` processes under steady load). Each takes an optional broken
variant (tests.history.variants) for the workers to run, and returns the finished
scenario: `violations` and `history_report` hold the checker's verdict.

- `leases_cut_short`: three times, 1 s apart, every lease of the worker holding the most
  runs expires under it (as when a worker pauses or loses the database for longer than
  its lease): its bodies run on and finish, their outcomes must be fenced out, and the
  runs are rescued and run again elsewhere. A schedule fires every second meanwhile, on
  every worker's scheduler.
- `timeouts_in_a_limited_queue`: every run of the limited queue times out (0.15 s) while
  its body runs on (0.5 s): a body that runs on holds its permit to its end.
- `steady`: the load alone, no fault.
"""

from __future__ import annotations

import dataclasses

import psycopg

from tests.chaos.harness import PROFILE, TIMING, Chaos
from tests.history.variants import ENV


def _env(variant: str | None) -> dict[str, str]:
    return {ENV: variant} if variant else {}


def cut_leases(dsn: str, pid: int) -> int:
    """Expire every lease the worker `pid` holds (now, by the database's clock)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(
            "UPDATE pgqueue.runs SET lease_expires_at = now()"
            " WHERE state = 'running' AND worker_id IN"
            " (SELECT id FROM pgqueue.workers WHERE pid = %s)",
            (pid,),
        )
        return cur.rowcount


def leases_cut_short(dsn: str, variant: str | None = None, cuts: int = 3) -> Chaos:
    name = "9. leases cut short" + (f" ({variant})" if variant else "")
    fault = f"{cuts}x every lease of the busiest worker expired under it, 1 s apart"
    # and a schedule firing every second, on every worker: each tick enqueues one run
    env = _env(variant) | {"PGQUEUE_CHAOS_CRON": "1"}
    with Chaos(name, fault, dsn, worker_env=env) as c:
        c.baseline()
        cut = 0
        with c.fault():
            for i in range(cuts):
                c.pace_until(c.fault_start + i)
                cut += cut_leases(dsn, c.fleet.live[c.fleet.victim()].pid)
        c.recover()
        c.note(f"{cut} leases cut short")
        c.finish(check_invariants=variant is None)
    return c


def timeouts_in_a_limited_queue(dsn: str, variant: str | None = None) -> Chaos:
    profile = dataclasses.replace(
        PROFILE, limited_seconds=0.5, limited_timeout=0.15, limited_max_attempts=1
    )
    name = "10. limited runs time out" + (f" ({variant})" if variant else "")
    fault = "every chaos_limited run times out after 0.15 s; its body runs 0.5 s"
    timing = dataclasses.replace(TIMING, warmup=3.0)
    with Chaos(name, fault, dsn, profile=profile, timing=timing, worker_env=_env(variant)) as c:
        c.baseline()
        with c.fault():
            pass
        c.recover()
        # every limited run fails by design (one attempt, which times out): the verdict
        # here is the history checker's alone
        c.finish(check_invariants=False)
    return c


def steady(dsn: str, variant: str | None = None) -> Chaos:
    name = "11. steady load" + (f" ({variant})" if variant else "")
    timing = dataclasses.replace(TIMING, warmup=3.0)
    with Chaos(name, "none", dsn, timing=timing, worker_env=_env(variant)) as c:
        c.baseline()
        with c.fault():
            pass
        c.recover()
        c.finish(check_invariants=variant is None)
    return c
