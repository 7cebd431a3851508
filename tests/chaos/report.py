"""One table row per chaos scenario: printed as the scenario ends (pytest -s shows it),
collected for the end-of-session summary, and appended as JSON to $PGQUEUE_CHAOS_REPORT
when that is set (docs/reliability.md is written from it)."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

REPORT_ENV = "PGQUEUE_CHAOS_REPORT"

COLUMNS = (
    "scenario",
    "fault",
    "runs",
    "lost",
    "dup (explained)",
    "step re-exec",
    "sem max / limit",
    "tput before / during / after (runs/s)",
    "worst 1 s (dip)",
    "recovery (s)",
    "claim p95 before / during / after (ms)",
    "wall (s)",
)


@dataclass
class Row:
    scenario: str
    fault: str
    mode: str
    runs: int = 0
    lost: int = 0
    failed: int = 0
    duplicates: int = 0  # executions of plain tasks beyond the first
    explained: int = 0  # ... of which backed by a lease_expired row of that run, or
    claim_reruns: int = 0  # ... by a claim lost with the primary (failover: see harness)
    step_reexec: int = 0  # step executions after that step's success was stored
    step_retries: int = 0  # re-runs of a step whose success was never stored (explained)
    sem_max: int = 0  # most chaos_limited bodies executing at once (execution spans)
    sem_limit: int = 0
    group_max: int = 0
    group_limit: int = 0
    sampled_max: int = 0  # most valid chaos_limited leases seen by the monitor
    tput_before: float = 0.0
    tput_during: float = 0.0
    tput_after: float = 0.0
    worst_1s: float = 0.0  # lowest completions in a 1 s bucket from fault start to recovery
    recovery: float | None = None
    claim_p95: tuple[float | None, float | None, float | None] = (None, None, None)
    wall: float = 0.0
    notes: list[str] = field(default_factory=list)

    def dip(self) -> float:
        """The worst second against the baseline (-100%: nothing finished for a second)."""
        return self.worst_1s / self.tput_before - 1 if self.tput_before else 0.0

    def cells(self) -> list[str]:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1000:.0f}"

        dup = f"{self.duplicates} ({self.explained})"
        if self.claim_reruns:
            dup = f"{self.duplicates} ({self.explained}: {self.claim_reruns} lost claims)"
        steps = str(self.step_reexec)
        if self.step_retries:
            steps += f" (+{self.step_retries} unstored)"
        sem = (
            f"{self.sem_max}/{self.sem_limit}, grp {self.group_max}/{self.group_limit}"
            f" (leases {self.sampled_max})"
        )
        lost = f"{self.lost}" + (f" ({self.failed} failed)" if self.failed else "")
        return [
            self.scenario,
            self.fault,
            str(self.runs),
            lost,
            dup,
            steps,
            sem,
            f"{self.tput_before:.0f} / {self.tput_during:.0f} / {self.tput_after:.0f}",
            f"{self.worst_1s:.0f} ({self.dip():+.0%})",
            "-" if self.recovery is None else f"{self.recovery:.1f}",
            " / ".join(ms(v) for v in self.claim_p95),
            f"{self.wall:.1f}",
        ]


ROWS: list[Row] = []
# The history checker's report of each scenario, headed by its name (tests/history/conftest.py
# prints them at the end of the session).
HISTORY: list[str] = []


def header() -> str:
    return "| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS)


def line(row: Row) -> str:
    return "| " + " | ".join(row.cells()) + " |"


def table(rows: list[Row]) -> str:
    out = [header(), *(line(r) for r in rows)]
    notes = [f"- {r.scenario}: {n}" for r in rows for n in r.notes]
    if notes:
        out += ["", *notes]
    return "\n".join(out)


def publish(row: Row) -> None:
    ROWS.append(row)
    print(f"\n{header()}\n{line(row)}")
    for n in row.notes:
        print(f"  - {n}")
    path = os.environ.get(REPORT_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(asdict(row)) + "\n")
