"""Running SPIN on tests/model/lease.pml: `spin -a` writes the verifier's C source, gcc
builds it, and the verifier (`pan`) searches every state.

- Safety: `pan -noclaim` (built with -DSAFETY): every assertion of the model (one_lease,
  fenced, one_end, permits) and no invalid end state, in every reachable state.
- Liveness: `pan -a -f` (acceptance cycles under weak fairness) against the LTL formula
  `terminates` (<> every run terminal).

A variant (-D macro of the model: NOFENCE, EARLYPERMIT, NORESCUE) builds a broken
protocol, for which the verifier must find a counterexample; `trail` then replays it
(`spin -t -p`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

MODEL = Path(__file__).with_name("lease.pml")
ROOT = Path(__file__).resolve().parents[2]
# how a model action names the SQL file it stands for: /* sql/NAME.sql */
SQL_REFERENCE = re.compile(r"/\*\s*(sql/[\w/]+\.sql)\b")
VARIANTS = ("NOFENCE", "EARLYPERMIT", "NORESCUE")
# processes under weak fairness: 2 workers, clock, rescuer, operator, init
NFAIR = 3


def available() -> bool:
    return shutil.which("spin") is not None and shutil.which("gcc") is not None


def sql_references(text: str | None = None) -> list[str]:
    """The SQL files the model's actions name, in order of first mention."""
    found = SQL_REFERENCE.findall(MODEL.read_text() if text is None else text)
    return list(dict.fromkeys(found))


@dataclass
class Verdict:
    check: str  # "safety" or "liveness"
    variant: str | None
    errors: int
    output: str
    trail: str = ""

    @property
    def holds(self) -> bool:
        return self.errors == 0

    def __str__(self) -> str:
        what = f"{self.check} of lease.pml" + (f" -D{self.variant}" if self.variant else "")
        verdict = "holds" if self.holds else f"{self.errors} error(s): counterexample below"
        return f"== {what}: {verdict}\n{self.output}" + (f"\n{self.trail}" if self.trail else "")


# Every verdict of this process, for the end of a test session (tests/model/conftest.py).
VERDICTS: list[Verdict] = []


def _run(args: list[str], cwd: Path, timeout: float) -> str:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0 and args[0] != "./pan":
        command = " ".join(args)
        raise RuntimeError(f"{command} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout + done.stderr


def verify(check: str, variant: str | None = None, timeout: float = 120.0) -> Verdict:
    """Build and run the verifier for `check` ("safety" or "liveness") on the model,
    or on its broken `variant`."""
    with tempfile.TemporaryDirectory(prefix="pgq-spin-") as tmp:
        work = Path(tmp)
        shutil.copy(MODEL, work / MODEL.name)
        _run(["spin", "-a", *([f"-D{variant}"] if variant else []), MODEL.name], work, timeout)
        if check == "safety":
            build, run = ["-DSAFETY"], ["./pan", "-noclaim", "-m100000"]
        elif check == "liveness":
            build, run = [f"-DNFAIR={NFAIR}"], ["./pan", "-a", "-f", "-m100000"]
        else:
            raise ValueError(check)
        _run(["gcc", "-O2", "-w", *build, "-o", "pan", "pan.c"], work, timeout)
        output = _run(run, work, timeout)
        errors = _errors(output)
        trail = ""
        if errors and (work / f"{MODEL.name}.trail").exists():
            replay = _run(["spin", "-t", "-p", "-g", MODEL.name], work, timeout)
            trail = "\n".join(replay.splitlines()[-60:])
        verdict = Verdict(check, variant, errors, output.strip(), trail)
        VERDICTS.append(verdict)
        return verdict


def _errors(output: str) -> int:
    found = re.search(r"errors: (\d+)", output)
    if found is None:
        raise RuntimeError(f"no verdict in the verifier's output:\n{output}")
    errors = int(found.group(1))
    # a search cut short by its depth limit proves nothing
    if "max search depth too small" in output:
        errors = max(errors, 1)
    return errors
