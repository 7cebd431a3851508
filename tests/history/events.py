"""What a history holds: events that producers, workers and the database record while
a scenario runs, and what the scenario read at its end.

Times are wall-clock seconds (time.time() in the processes, clock_timestamp() on the
server: one host, one clock). A lease token names one attempt: a run's id and the token
of the claim that started it (sql/claim.sql)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar


@dataclass(frozen=True)
class Event:
    """Base of every event: when it happened, and the run it is about (if any)."""

    at: float
    run: int | None

    def describe(self) -> str:
        fields = ", ".join(
            f"{k}={v!r}" for k, v in vars(self).items() if k not in ("at", "run") and v is not None
        )
        run = f" run {self.run}" if self.run is not None else ""
        return f"{self.at:.3f} {type(self).__name__}{run}" + (f" ({fields})" if fields else "")


@dataclass(frozen=True)
class Enqueued(Event):
    """A producer's enqueue was acknowledged: its transaction committed."""


@dataclass(frozen=True)
class RolledBack(Event):
    """A producer enqueued this run in a transaction that it then rolled back."""


@dataclass(frozen=True)
class Claimed(Event):
    """The database gave the run to an attempt under `token`. `while_held`: the token of
    another attempt whose lease was still valid at that moment (None when there was
    none, as there must be)."""

    attempt: int
    token: str
    while_held: str | None = None


@dataclass(frozen=True)
class Started(Event):
    """An attempt's body began in a worker process (`pid`) under `token`."""

    attempt: int
    token: str | None
    pid: int


@dataclass(frozen=True)
class Effect(Event):
    """A body executed from `at` to `end` (None: it never ended, its process died): a
    task's body (`step` None) or a step's. While a task body of a limited queue runs it
    holds a permit of that queue (and of its group): `at` takes it, `end` returns it."""

    attempt: int | None
    token: str | None
    queue: str | None = None
    group: str | None = None
    step: str | None = None
    end: float | None = None
    pid: int | None = None


@dataclass(frozen=True)
class Renewed(Event):
    """A lease renewal (heartbeat) was accepted. `lease_valid`: the lease had not
    expired when it was written."""

    token: str
    lease_valid: bool = True


@dataclass(frozen=True)
class OutcomeWritten(Event):
    """An attempt's outcome was accepted: the run went from `running` to `state`.
    `writer`: the token of the attempt whose outcome it was (from its result; None when
    the outcome does not say); `holder`: the token that held the run when it was written;
    `lease_valid`: that lease had not expired."""

    state: str
    writer: str | None
    holder: str | None
    lease_valid: bool = True


@dataclass(frozen=True)
class OutcomeRejected(Event):
    """A task body under `token` returned (at `at`) and no outcome of its attempt was
    ever accepted: the fence rejected it, or the worker, knowing its lease lost, did not
    send it. Derived at the end from the other events."""

    token: str


@dataclass(frozen=True)
class LeaseLost(Event):
    """The attempt under `token` lost its lease: `why` is "rescued" (it expired and the
    run was taken back; `at` is when it expired) or "canceled"."""

    token: str
    why: str = "rescued"


@dataclass(frozen=True)
class StepStored(Event):
    """A step's success was stored by `attempt`; `lease_valid`: that attempt held a valid
    lease on the run when it was written."""

    step: str
    attempt: int
    lease_valid: bool = True


@dataclass(frozen=True)
class Terminal(Event):
    """The run's state changed into, or out of, a terminal state."""

    old_state: str
    new_state: str


@dataclass(frozen=True)
class CronTick(Event):
    """A schedule's tick enqueued this run."""

    schedule: str
    tick: str


@dataclass(frozen=True)
class Final(Event):
    """The run's state when the scenario ended (read from the database)."""

    state: str


E = TypeVar("E", bound=Event)


@dataclass
class History:
    """Every event of one scenario, and the limits of the queues it ran: queue name ->
    (concurrency, group_concurrency), either None."""

    events: list[Event] = field(default_factory=list)
    limits: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)

    def add(self, *events: Event) -> None:
        self.events.extend(events)

    def of(self, kind: type[E]) -> list[E]:
        return sorted((e for e in self.events if isinstance(e, kind)), key=lambda e: e.at)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for e in self.events:
            out[type(e).__name__] = out.get(type(e).__name__, 0) + 1
        return dict(sorted(out.items()))
